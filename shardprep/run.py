"""``python -m shardprep.run``: re-shard raw data into exactly balanced, shuffled TFRecord shards.

Flags of this tool are parsed here; every other flag goes to Beam (``--temp_location``,
``--project`` ...), as in Beam's own examples.
"""
from __future__ import annotations

if __name__ == "__main__":  # a signal during the imports below: one line and 130, as later
    from shardprep.cli import exit_early_on_interrupt

    exit_early_on_interrupt("shardprep.run")
    # one OpenBLAS thread unless set: numpy's OpenBLAS starts a thread per core that spins before it
    # sleeps, and nothing a re-shard runs calls BLAS
    import os

    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import contextlib
import logging
import os
from collections.abc import Sequence

from pipelines import engines
from shardprep import (
    capacity,
    cli,
    config,
    faults,
    formats,
    fs,
    generations,
    interrupts,
    label_vocab,
    lease,
    malloc,
    manifest,
    naming,
    planning,
    retention,
    run_checks,
    schema,
    submit,
)
from shardprep.errors import InputError, RunError, UsageError
from shardprep.formats import tfds as tfds_input
from shardprep.formats.csv import dialect
from shardprep.formats.csv.dialect import DEFAULT_NULL_VALUES
from shardprep.formats.images import LABEL as IMAGE_LABEL
from shardprep.formats.images import ImageOptions
from shardprep.summary import print_summary
from shardprep.text import prepare as text_prepare
from shardprep.text.store_stages import TextRun

log = logging.getLogger("shardprep")
AUTO_STATISTICS_FEATURES = 1000  # --statistics auto: computed up to this many features (each costs CPU and manifest bytes in every split)

EPILOG = """\
examples:
  python -m shardprep.run --input 'raw/*.csv' --output ds --workers 4 --split train=0.9,eval=0.1
  python -m shardprep.run --input gs://b/raw/*.jsonl --output gs://b/ds --num-shards 256 --compression gzip
  python -m shardprep.run ... --runner dataflow --project P --region R --temp_location gs://b/tmp --setup_file ./setup.py

Flags Apache Beam knows (--temp_location, --project ...) are passed to it; any other argument is
refused. The data set is committed by DIR/manifest.json, written last.
"""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m shardprep.run",
        description="Re-shard CSV, JSON Lines, Parquet or TFRecord files into exactly balanced, globally "
        "shuffled TFRecord shards of tf.train.Example, with a manifest written last as the commit marker.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    io = p.add_argument_group("input and output")
    io.add_argument("--input", action="append", required=True, metavar="GLOB",
                    help="input files: a path, glob or URL (gs://, file://); repeat to combine several")
    io.add_argument("--output", required=True, metavar="DIR", help="data set folder (local, NFS or gs://)")
    io.add_argument("--format", default="auto", choices=("auto", *formats.FORMATS),
                    help="input format; auto picks it from each file's extension (.csv .jsonl .parquet .tfrecord, "
                    "each optionally .gz) (default: %(default)s)")
    io.add_argument("--schema", metavar="FILE.json",
                    help="features as in the manifest ({name: {dtype, shape}}); default: inferred from the first "
                    "records of the first files. Fields not in a given schema are dropped")
    io.add_argument("--overwrite", action="store_true",
                    help="replace a finished data set in DIR (default: refuse before reading any input)")
    io.add_argument("--append", action="store_true", help="add the input's records to the data set in DIR as a new "
                    "generation of exactly balanced shards under a new manifest version (committed shards are never "
                    "rewritten); the input must match its schema; --split, --seed and --compression are its own")
    io.add_argument("--keep-previous", type=int, default=1, metavar="N",
                    help="committed runs kept besides the new one, so trainers reading them finish (default: %(default)s)")
    io.add_argument("--compression", default=None, choices=config.COMPRESSIONS, help="shard compression (default: none)")
    sh = p.add_argument_group("sharding")
    sh.add_argument("--num-shards", type=int, metavar="N", help="shards per split")
    sh.add_argument("--workers", type=int, metavar="W",
                    help="training workers: picks a shard count that is a multiple of W with shards near "
                    "--target-shard-mb (with --num-shards: W must divide N)")
    sh.add_argument("--shards-per-worker", type=int, metavar="K", help="with --workers: exactly W*K shards per split")
    sh.add_argument("--target-shard-mb", type=float, default=128.0, metavar="MB",
                    help="shard size --workers aims for (default: %(default)s)")
    sh.add_argument("--split", default=None, metavar="SPEC",
                    help="splits and their shares, e.g. train=0.9,eval=0.1; membership is a keyed hash of each "
                    "record, stable across runs and runners (default: train; --format tfds: the TFDS splits kept)")
    sh.add_argument("--seed", type=int, default=None, help="seed of the split hash and of the shuffle (default: 42)")
    sh.add_argument("--no-shuffle", action="store_true", help="keep input order, dealt round-robin to shards")
    tab = p.add_argument_group("CSV dialect and missing values")
    tab.add_argument("--delimiter", metavar="C", help="CSV field delimiter: one character, or tab, space, comma, "
                     "semicolon, pipe (default: sniffed per file among , ; tab |, and logged)")
    tab.add_argument("--no-header", action="store_true", help="line 1 of each CSV file is data; the columns are named c0, c1, ... unless --column-names names them")
    tab.add_argument("--column-names", metavar="A,B,C", help="CSV column names (replace the header's, if any)")
    tab.add_argument("--null-values", metavar="V,...", help="CSV values that mean missing, comma-separated, an empty "
                     "item for the empty field (default: the empty field, " + ", ".join(DEFAULT_NULL_VALUES[1:]) + ")")
    tab.add_argument("--required", metavar="A,B", help="features whose missing value makes the record dead letter "
                     "missing_value (e.g. the label)")
    tab.add_argument("--on-missing", default="omit", choices=schema.ON_MISSING,
                     help="omit: a missing value leaves its feature out of the Example, and the manifest marks it "
                     "nullable; reject: every missing value is dead letter missing_value (default: %(default)s)")
    tab.add_argument("--statistics", nargs="?", const="on", default="auto", choices=("auto", "on", "off"),
                     help="per split and feature statistics in the manifest (count, missing, zeros, min/max/mean/std, "
                     "quantiles and histograms, list lengths, string lengths, distinct and most frequent values: the "
                     "trainer's normalisation and label vocabulary, and python -m shardprep.report), computed from the "
                     f"columns as they are read; auto = on (off for --task text runs and past {AUTO_STATISTICS_FEATURES:,} "
                     "features) (default: %(default)s)")
    tab.add_argument("--stats-top-k", type=int, default=1000, metavar="K",
                     help="most frequent values per string feature and split in the manifest's statistics "
                     "(default: %(default)s)")
    bad = p.add_argument_group("bad records")
    bad.add_argument("--max-bad-records", type=int, default=0, metavar="N",
                     help="accept up to N bad records (kept in DIR/<run>/rejected/); above N nothing is "
                     "committed (default: %(default)s)")
    bad.add_argument("--max-record-mb", type=float, default=64.0, metavar="MB",
                     help="a record (line, TFRecord frame) larger than this is dead letter record_too_large, read "
                     "in bounded memory (default: %(default)s)")
    bad.add_argument("--allow-non-finite", action="store_true",
                     help="store NaN and +-Infinity float values (default: dead letter non_finite)")
    img = p.add_argument_group("images (--format images: --input is ROOT/<class>/<image> or a CSV/JSON Lines listing)")
    img.add_argument("--check-images", default="header", choices=("header", "decode"),
                     help="header: read each image's header only (fast); decode: decode every pixel with Pillow, "
                     "which also catches damage inside the data (default: %(default)s)")
    img.add_argument("--max-side", type=int, metavar="PX",
                     help="re-encode images whose longer side exceeds PX as JPEG of that size (default: keep bytes)")
    img.add_argument("--max-image-pixels", type=int, default=ImageOptions.max_pixels, metavar="N", help="an image whose header declares more pixels is dead letter image_too_large, at every --check-images level (default: %(default)s, as Pillow)")
    img.add_argument("--jpeg-quality", type=int, default=90, metavar="Q", help="JPEG quality of --max-side (default: %(default)s)")
    img.add_argument("--image-path-column", default="path", metavar="NAME", help="listing column of image paths (default: %(default)s)")
    img.add_argument("--image-label-column", default="label", metavar="NAME",
                     help="listing column of class names (default: %(default)s)")
    cls = p.add_argument_group("class ids shared with another data set (--format images, --task text-classification)")
    cls.add_argument("--labels-from", metavar="DIR",
                     help="take the class names and ids of the data set at DIR (its manifest's class names), so that "
                     "a test set prepared apart gets the training set's ids; a class DIR lacks is refused")
    cls.add_argument("--label-vocab", metavar="FILE",
                     help="the class names in id order, one a line (as TFDS's labels.txt); a class FILE lacks is refused")
    run = p.add_argument_group("execution")
    run.add_argument("--runner", default="direct", choices=engines.RUNNERS, help=engines.HELP + " (default: %(default)s)")
    run.add_argument("--dask-address", metavar="HOST:PORT", help="join this Dask scheduler instead of starting one")
    run.add_argument("--dask-workers", type=int, metavar="N", help="workers of the local Dask cluster (default: one per core)")
    run.add_argument("--local-workers", type=int, metavar="N",
                     help="direct runner: worker processes on this machine (default: one per core; one for inputs "
                     "under 1 MB or of one work unit); Beam's --direct_num_workers=N means the same")
    run.add_argument("--unit-mb", type=float, metavar="MB",
                     help="work units: large CSV, JSON Lines and uncompressed TFRecord files are cut into units of "
                     "about this size, images batched up to it (default: the input's size / 16, between 16 and 64 "
                     "MB, so that a few large files still give 16 cores a unit each)")
    run.add_argument("--verbose", action="store_true", help="more log lines, and tracebacks of unexpected errors")
    text_prepare.add_arguments(p)
    return p


def _refuse_output_in_input(output: str, files: Sequence[formats.InputFile]) -> None:
    """Refuses an output folder that the input globs reach (a rerun would read its own shards)."""
    local = fs.is_local(output)
    root = (os.path.realpath(output.removeprefix("file://")) if local else output).rstrip("/") + "/"
    folders: dict[str, str] = {}  # a folder's real path, found once for all its files

    def real(url: str) -> str:
        if not (local and fs.is_local(url)):
            return url
        if os.path.islink(url):
            return os.path.realpath(url)
        folder, name = os.path.split(url)
        if folder not in folders:
            folders[folder] = os.path.realpath(folder)
        return os.path.join(folders[folder], name)

    # a folder not made yet holds no input file: no link to resolve, no stat a file
    inside = [f.url for f in files if real(f.url).startswith(root)] if not local or os.path.exists(root) else []
    inside += [f.url for f in files if f.format == "images" and root.startswith(f.url.rstrip("/") + "/")]  # a folder
    if inside:
        raise UsageError(
            f"--output {output} is inside the input: {inside[0]} matches --input; write the data set elsewhere "
            f"or narrow the --input glob"
        )


def _schema(args: argparse.Namespace, files: Sequence[formats.InputFile]) -> tuple[schema.Schema, str]:
    fixed = formats.own_schema(files, bool(args.schema))  # image fields, a TFDS folder's features
    if fixed is not None:
        return fixed, "reject"
    if args.schema:
        return formats.described(files, schema.load_schema(args.schema)), "ignore"
    rows = formats.sample_rows(files)
    if not rows:
        raise InputError(
            "found no valid records to infer a schema from in the first input files (they are empty, hold only a "
            "header, or every record is bad); check --input, or give --schema to send bad records to the dead letters"
        )
    inferred = schema.infer_schema(rows, text=all(f.format == "csv" for f in files))
    return formats.described(files, inferred), "reject"  # Parquet: the units of time columns


def _names(text: str | None, flag: str) -> tuple[str, ...]:
    try:
        return dialect.parse_names(text, flag) if text is not None else ()
    except ValueError as e:
        raise UsageError(str(e)) from None


def _input_options(args: argparse.Namespace) -> formats.InputOptions:
    """The CSV dialect flags, checked."""
    try:
        delimiter = dialect.parse_delimiter(args.delimiter) if args.delimiter is not None else None
    except ValueError as e:
        raise UsageError(str(e)) from None
    nulls = tuple(args.null_values.split(",")) if args.null_values is not None else None
    return formats.InputOptions(delimiter, not args.no_header, _names(args.column_names, "--column-names"), nulls)


def _spill_in_place(on_this_machine: bool, files: Sequence[formats.InputFile]) -> bool:
    """Whether WriteShards may read the spill in place (``graph.spill``): only processes of this
    machine, whose page cache holds the spill (the engine says: ``Engine.on_this_machine``), and
    only while it takes at most half the free memory; workers of other machines (a Dask cluster's,
    a portable runner's) would each read all of it."""
    if not on_this_machine:
        return False
    size, memory = capacity.spill_bytes(files), capacity.available_memory()
    if capacity.fits_in_memory(size, memory):
        return True
    log.info("the spill (up to %.0f MB) may not stay in the page cache (%.0f MB of free memory): each batch is "
             "reordered by shard in spill (one more write), so that WriteShards reads a shard's records in one piece",
             size / 1e6, (memory or 0) / 1e6)
    return False


def _given_classes(args: argparse.Namespace) -> tuple[str, ...]:
    """``--labels-from``/``--label-vocab``'s class names (``shardprep.label_vocab``); kept on ``args.label_classes``
    for a text-classification run."""
    if (args.labels_from or args.label_vocab) and args.format != "images" and args.task != text_prepare.CLASSIFICATION:
        raise UsageError(f"{'--labels-from' if args.labels_from else '--label-vocab'} goes with --format images or --task "
                         "text-classification (other formats keep the label values the input holds)")
    args.label_classes = label_vocab.resolve_flags(labels_from_dir=args.labels_from, label_vocab=args.label_vocab,
                                                   feature=IMAGE_LABEL if args.format == "images" else None)
    return args.label_classes


def _main(argv: Sequence[str] | None) -> int:
    args, beam_args = parser().parse_known_args(argv)
    cli.configure_logging(args.verbose)
    engine = engines.engine(args.runner)
    options = engine.checked(engines.RunOptions(args.runner, args.local_workers, args.dask_address, args.dask_workers,
                                                tuple(beam_args)))  # the command line, before any input is read
    run_checks.check_flags(args)
    vocab = text_prepare.check(args)  # a bad --vocab: one line, before any input is read
    run_checks.check_output(args.output)
    parent = run_checks.data_set(args)  # with --append: also its --split, --seed and --compression
    splits = planning.parse_splits(args.split or "train")
    if args.num_shards is not None:
        planning.check_num_shards(args.num_shards, args.workers)
    classes = _given_classes(args)  # before any input is read
    malloc.pause_collections()  # many small objects, all kept, no cycles: no collection until the plan is made
    files = formats.expand_inputs(args.input, args.format, ImageOptions(
        args.check_images, args.max_side, args.jpeg_quality, args.image_path_column, args.image_label_column, args.max_image_pixels,
        classes if args.format == "images" else ()))
    own = formats.own_splits(files, args.split)  # the TFDS splits kept, unless --split merges and re-splits them
    if own is not None:
        files, splits = own
    text_prepare.check_inputs(args, files)  # a text flag the input does not fit: one line, before any input is read
    _refuse_output_in_input(args.output, files)
    files = formats.prepare_inputs(files, _input_options(args))
    unit_bytes = (int(args.unit_mb * 1024 * 1024) if args.unit_mb is not None
                  else formats.auto_unit_bytes(sum(f.size for f in files)))
    max_record_bytes = int(args.max_record_mb * 1024 * 1024)
    tabular = [f for f in files if f.format != "text"]
    units = formats.plan_units(tabular if args.task else files, unit_bytes=unit_bytes, max_record_bytes=max_record_bytes,
                               group=not args.task)  # a text run's store takes each file's own units
    in_place = _spill_in_place(engine.on_this_machine(options), files)  # after planning: Parquet footers read once
    features, extra = (text_prepare.schema_of(args), "reject") if args.task else _schema(args, files)
    if args.append:  # before any record is read by the pipeline
        features = generations.check_schema(parent.features, features, root=args.output, text_input=not args.schema and all(f.format == "csv" for f in files))
    cfg = config.ReshardConfig(
        output=args.output.rstrip("/") if args.output != "/" else args.output,
        run_id=naming.new_run_id(),
        features=schema.schema_to_json(features),
        sources=tuple((f.url, f.size) for f in files),
        versions=tuple(f.version for f in files),
        allow_non_finite=args.allow_non_finite,
        splits=splits,
        seed=args.seed,
        shuffle=not args.no_shuffle,
        compression=args.compression,
        num_shards=args.num_shards,
        workers=args.workers,
        shards_per_worker=args.shards_per_worker,
        target_shard_bytes=int(args.target_shard_mb * 1024 * 1024),
        max_bad_records=args.max_bad_records,
        overwrite=args.overwrite,
        keep_previous=args.keep_previous,
        extra_fields=extra,
        tfds_features=tfds_input.output_features(files, args.schema),
        on_missing=args.on_missing,
        required=_names(args.required, "--required"),
        statistics=False if args.task else _statistics(args.statistics, len(features)),
        stats_top_k=args.stats_top_k,
        statistics_in_parse=any(formats.format_of(f).gives_columns for f in files),
        spill_in_place=in_place,
        append=args.append, **args.dedup_fields,
        base=parent.identity if parent is not None else "",
    )
    malloc.freeze_plan()  # the plan lives as long as the run: later collections leave it out (main ends that)
    log.info("%d input files, %s, %d features; run %s -> %s", len(files),
             "work units cut from the document store once it is built" if args.task else f"{len(units)} work units",
             len(features), cfg.run_id, cfg.output)

    text_run = None
    if args.task:  # the document store and the units over it: the job's first stages (text.store_stages)
        column_units: dict[int, list] = {}
        for u in units:
            column_units.setdefault(u.file.index, []).append(u)
        text_run = TextRun(args, vocab, tuple(files), column_units, max_record_bytes)
    faults.pause("run.planned")  # test hook: another run may commit between this run's planning and its lease
    try:
        return _run(cfg, units, options, text_run)
    except KeyboardInterrupt:  # come once the run had ended (committed: it stays so, exit 0)
        if interrupts.committed_anyway(cfg.output, cfg.run_id):
            return 0
        raise


def _run(cfg: config.ReshardConfig, units: Sequence[formats.WorkUnit], options: engines.RunOptions,
         text_run: TextRun | None = None) -> int:
    """The run, under its lease: exit 0 once committed (``_finish``) or built (a dry run). Its job
    is built, staged and run by ``shardprep.submit`` (``text_run``: a text run's, whose first
    stages build its document store)."""
    ran = True  # unless a Dataflow dry run; also when an interrupt came after the commit
    with lease.hold(cfg.output, cfg.run_id):  # one run per --output, from here to the end of its clean-up
        with interrupts.discarding_on_failure(cfg.output, cfg.run_id):  # Ctrl-C: exit 130; the run folder removed
            ran = submit.run(cfg, units, options, text=text_run)
        if not ran:
            print(f"dry run: built the job graph of run {cfg.run_id}; nothing was submitted")
            return 0
        return _finish(cfg)


def _finish(cfg: config.ReshardConfig) -> int:
    """Reads back what the commit step wrote: the manifest of this run, or its report (RunError)."""
    import json

    faults.pause("run.finish")  # test hook (an interrupt once the run has ended)
    report_url = naming.join(cfg.output, naming.report_path(cfg.run_id))
    if fs.exists(report_url):
        report = json.loads(fs.read_bytes(report_url))
        errors = report.get("errors") or ["unknown failure"]
        if report.get("raced"):  # another run committed first: this one leaves nothing behind
            retention.discard_run(cfg.output, cfg.run_id, whole=True)
            raise RunError(errors[0])
        raise RunError(f"{errors[0]} (report: {report_url})")
    if not manifest.exists(cfg.output):
        raise RunError(f"the pipeline finished but wrote no manifest to {cfg.output}")
    result = manifest.load(cfg.output)
    if cfg.run_id not in result.run_ids:
        raise RunError(f"{naming.join(cfg.output, naming.MANIFEST)} belongs to another run")
    if not fs.exists(naming.join(cfg.output, manifest.run_copy_path(cfg.run_id))):  # the commit was cut short
        with contextlib.suppress(OSError):
            manifest.write_run_copy(cfg.output, cfg.run_id, result)
    print_summary(cfg.output, result)
    return 0


def _statistics(choice: str, features: int) -> bool:
    """Whether to compute statistics: as asked, or (auto) on unless the table is wider than
    ``AUTO_STATISTICS_FEATURES`` (a wide table's statistics cost more than its cells: docs/design.md)."""
    if choice != "auto":
        return choice == "on"
    if features > AUTO_STATISTICS_FEATURES:
        log.info("statistics off (--statistics auto: off past %s features; this input has %s; --statistics on "
                 "computes them)", f"{AUTO_STATISTICS_FEATURES:,}", f"{features:,}")
        return False
    return True


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return cli.main("shardprep.run", _main, argv)
    finally:
        malloc.unfreeze_plan()


if __name__ == "__main__":
    cli.exit_now(main())
