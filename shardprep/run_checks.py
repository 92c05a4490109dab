"""Checks of the re-shard command line that run before any input is read.

Every flag, every argument Beam would receive and the output folder are checked here, so a typo
(``--num_shards 4``), an unquoted glob the shell expanded into extra words, a size of 0, NaN or
infinity, or an output that is a file, unwritable or reached through ``..`` after a missing
folder, fails at once with one line (exit 2) instead of after the input was parsed or never.
"""
from __future__ import annotations

import argparse
import math
import os
from collections.abc import Sequence

from shardprep import fs, manifest, naming, planning
from shardprep.capacity import machine_cores
from shardprep.errors import UsageError

__all__ = ["append_settings", "check_flags", "check_output", "data_set", "dedup", "direct_flags", "refuse_unknown_args"]

_DIRECT_FLAGS = ("--direct_num_workers", "--direct_running_mode")
_MODES = ("in_memory", "multi_threading", "multi_processing")  # Beam's; each means the local pool here


def _beam_unknown(args: Sequence[str]) -> list[str]:
    """The arguments that no registered Beam ``PipelineOptions`` class knows (Beam would discard them),
    as Beam's own parser of every registered option leaves them: ``get_all_options`` builds that
    parser and hands it to its public ``add_extra_args_fn`` hook, where it parses ``args``."""
    from apache_beam.options.pipeline_options import PipelineOptions

    unknown: list[str] = []
    PipelineOptions([]).get_all_options(
        add_extra_args_fn=lambda parser: unknown.extend(parser.parse_known_args(list(args))[1]))
    return unknown


def refuse_unknown_args(beam_args: Sequence[str], *, beam: bool = True) -> None:
    """Refuses any argument that neither shardprep nor Beam knows: Beam would drop it with a warning.
    Without ``beam`` (an engine that is not Beam's), every argument left is refused."""
    unknown = (_beam_unknown(beam_args) if beam else list(beam_args)) if beam_args else []
    flags = [a for a in unknown if a.startswith("-")]
    bare = [a for a in unknown if not a.startswith("-")]
    if flags:
        flag = flags[0].split("=")[0]
        hint = (f" (did you mean --{flag[2:].replace('_', '-')}?)" if "_" in flag else
                " (Beam flags use underscores, e.g. --direct_num_workers)" if "-" in flag[2:] else "")
        knows = "neither shardprep nor Apache Beam knows it" if beam else (
            "shardprep does not know it (Beam's own flags apply with --runner beam, dataflow, flink, spark or portable)")
        raise UsageError(f"unknown argument {flags[0]!r}: {knows}{hint}; see --help")
    if bare:
        raise UsageError(f"unexpected argument {bare[0]!r}: a flag's value missing, or an unquoted --input glob that "
                         "the shell expanded into several paths; quote the glob (--input 'data/*.csv') or repeat --input")


def _size_flag(flag: str, value: float, example: int) -> None:
    if not (math.isfinite(value) and value > 0):
        raise UsageError(f"{flag} {value:g}: expected a finite size above 0 (e.g. {flag} {example})")


def check_flags(args: argparse.Namespace) -> None:
    """Every flag whose value alone can be wrong, before anything is read."""
    if args.unit_mb is not None:
        _size_flag("--unit-mb", args.unit_mb, 64)
    _size_flag("--target-shard-mb", args.target_shard_mb, 128)
    _size_flag("--max-record-mb", args.max_record_mb, 64)
    for flag, value in (("--max-bad-records", args.max_bad_records), ("--keep-previous", args.keep_previous)):
        if value < 0:
            raise UsageError(f"{flag} {value}: expected 0 or more")
    for flag, value in (("--workers", args.workers), ("--shards-per-worker", args.shards_per_worker),
                        ("--num-shards", args.num_shards), ("--dask-workers", args.dask_workers)):
        if value is not None and value < 1:
            raise UsageError(f"{flag} {value}: expected 1 or more")


def check_output(output: str) -> None:
    """Refuses an output that cannot become a data set folder: a file, a path through a file, ``..``
    after a missing folder, or a folder this user cannot write (local paths; remote ones at commit)."""
    if not output.strip():
        raise UsageError("--output is empty: give a folder for the data set")
    if not fs.is_local(output):
        return
    path = output.removeprefix("file://")
    parts = path.split("/")
    for i, part in enumerate(parts):
        if part == ".." and not os.path.isdir("/".join(parts[:i]) or "/"):
            raise UsageError(f"--output {output}: '..' follows {'/'.join(parts[:i])!r}, which is not a folder; "
                             "give the path without '..'")
    path = os.path.abspath(path)
    if os.path.exists(path) and not os.path.isdir(path):
        raise UsageError(f"--output {output} is a file, not a folder: choose a folder (it is created if missing)")
    existing = path
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise UsageError(f"--output {output}: {existing} is a file, so no folder can be made under it")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"--output {output}: {existing} is not writable by this user; choose another --output "
                         "or fix its permissions")


def direct_flags(args: Sequence[str], local_workers: int | None) -> tuple[int | None, list[str]]:
    """The direct runner's process count, and the Beam flags left once Beam's own ``--direct_*`` flags
    are taken out of ``args``: ``--direct_num_workers=N`` is ``--local-workers N`` (0: one per core, as
    in Beam), whatever ``--direct_running_mode`` says; the pool runs them, never Beam's SDK workers."""
    rest: list[str] = []
    values: dict[str, str] = {}
    items = iter(args)
    for arg in items:
        name, eq, value = arg.partition("=")
        if name not in _DIRECT_FLAGS:
            rest.append(arg)
            continue
        values[name] = value if eq else next(items, "")
    mode = values.get("--direct_running_mode", "in_memory")
    if mode not in _MODES:
        raise UsageError(f"--direct_running_mode {mode!r}: expected one of {', '.join(_MODES)}")
    text = values.get("--direct_num_workers")
    if text is None:
        return local_workers, rest
    if not text.isdigit():
        raise UsageError(f"--direct_num_workers {text!r}: expected a count (e.g. --direct_num_workers={machine_cores()})")
    count = int(text) or machine_cores()
    if local_workers is not None and local_workers != count:
        raise UsageError(f"--local-workers {local_workers} and --direct_num_workers={text} ask for different process "
                         "counts: give one of them")
    return count, rest


def data_set(args: argparse.Namespace) -> manifest.Manifest | None:
    """The committed data set in ``--output``, read before any input: the one an append adds to (refused
    without one), and the version every run expects to find at its commit (``config.base``). Without
    --overwrite or --append a finished data set is refused."""
    if args.append and args.overwrite:
        raise UsageError("--append adds to the data set in --output and --overwrite replaces it: give one of them")
    parent = _data_set(args)
    if args.append:
        append_settings(args, parent)
    args.dedup_fields = dedup(args, parent)
    args.seed = 42 if args.seed is None else args.seed
    args.compression = args.compression or "none"
    return parent


def dedup(args: argparse.Namespace, parent: manifest.Manifest | None) -> dict:
    """``--dedup``/``--dedup-key`` of a re-shard of records, as ``ReshardConfig`` fields (a text run's
    ``--dedup`` is its document store's: ``shardprep.text``). An append with ``--dedup exact`` checks
    its records against the data set's generations' hashes: each must keep them, of the same key."""
    mode, key = getattr(args, "dedup", None) or "none", getattr(args, "dedup_key", None) or ""
    if args.task:
        if key:
            raise UsageError(f"--dedup-key {key} goes with records, not --task: a text run's --dedup compares documents")
        return {}
    if mode == "near":
        raise UsageError("--dedup near goes with --task (documents); records take --dedup exact: the same Example "
                         "bytes, or the same --dedup-key value")
    if key and mode != "exact":
        raise UsageError(f"--dedup-key {key} goes with --dedup exact")
    if mode == "none":
        return {}
    against = []
    if args.append and parent is not None:
        for i, g in enumerate(parent.all_generations(), 1):
            if g.hashes is None:
                raise UsageError(f"--append --dedup exact: generation {i} (run {g.run_id}) of {args.output} keeps no "
                                 "record hashes (it was made without --dedup exact), so its records cannot be compared "
                                 "without reading them: re-shard everything once with --overwrite --dedup exact")
            if g.hashes.key != key:
                theirs = f"--dedup-key {g.hashes.key}" if g.hashes.key else "no --dedup-key (whole records)"
                raise UsageError(f"--append --dedup exact{f' --dedup-key {key}' if key else ''}: generation {i} of "
                                 f"{args.output} was deduplicated with {theirs}; give the same")
            against.append(g.hashes)
    return {"dedup": mode, "dedup_key": key, "dedup_against": tuple(against)}


def _data_set(args: argparse.Namespace) -> manifest.Manifest | None:
    if not manifest.exists(args.output):
        if args.append:
            raise UsageError(f"--append: {args.output} holds no committed data set ({naming.MANIFEST} is missing); "
                             "run without --append to create it")
        return None
    if not args.append and not args.overwrite:  # a finished data set is never replaced unasked
        raise UsageError(f"{naming.join(args.output, naming.MANIFEST)} exists: {args.output} already holds a finished "
                         "data set; pass --overwrite to replace it, --append to add to it, or choose another --output")
    return manifest.load(args.output)


def append_settings(args: argparse.Namespace, parent: manifest.Manifest) -> None:
    """An append's --split, --seed and --compression: the data set's, and refused when given otherwise."""
    if args.task or parent.text is not None:
        raise UsageError("--append adds tabular or image records; a text run (--task) is re-made with --overwrite")
    names = sorted(parent.splits)
    if args.split is None:
        if len(names) > 1:
            raise UsageError(f"--append: the data set at {args.output} has splits {', '.join(names)}: give --split "
                             f"with their shares for the new records (e.g. {','.join(f'{n}=...' for n in names)})")
        args.split = names[0]
    given = sorted(s.name for s in planning.parse_splits(args.split))
    if given != names:
        raise UsageError(f"--append --split {args.split}: the data set at {args.output} has splits {', '.join(names)}; "
                         "an append adds records to those splits")
    for flag, value, theirs in (("--seed", args.seed, parent.seed), ("--compression", args.compression, parent.compression)):
        if value is not None and value != theirs:
            raise UsageError(f"--append {flag} {value}: the data set at {args.output} has {flag} {theirs}; leave it out")
    args.seed, args.compression = parent.seed, parent.compression
    if args.no_shuffle == parent.shuffled:
        raise UsageError(f"--append: the data set at {args.output} is {'' if parent.shuffled else 'not '}shuffled: "
                         f"{'leave --no-shuffle out' if parent.shuffled else 'give --no-shuffle'}")
    if args.format == "images" and not (args.labels_from or args.label_vocab):
        args.labels_from = args.output  # the data set's class ids
