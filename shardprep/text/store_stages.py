"""A text run's job: its document store and the work units over it, declared as the job's first stages.

The units of a text run are byte ranges of its document store (``text.store``), known once the
store is built, so the job builds it first (``shardprep.job.planned_job``)::

    staged parts -> ExpandParts -> BuildStore -> [all] PlanUnits --chunk numbers--> ExpandUnits -> (the re-shard)
                                       '--bands--> [by bucket] GroupBands --edges--'(side input)

The launcher stages the store's parts (a file each, or a piece of a large .txt file:
``text.store.store_parts``) and a given ``--vocab`` (``stage_text``); ``BuildStore`` builds the
parts on the engine's workers (``text.store.BuildPart``); with ``--dedup near`` it writes each
part's band entries too (``text.bands.write_part``), one piece a bucket, and ``GroupBands`` gets a
bucket's pieces of every part (the engine's group by key) and verifies its band groups' candidate
pairs there, on the workers; ``PlanUnits``, once they are all built, joins them
(``text.store.join_store``: the leader rule over those edges alone, ``text.dedup``), trains ``--train-vocab``'s vocabulary over the store,
stages the units with the manifest's ``text`` entry (``graph.units.stage``) and gives their chunk
numbers to the re-shard. Every engine runs these stages as it runs the others.

Where the documents are tokenized is decided here, once: a pre-training run with a given
vocabulary and no ``--dedup`` tokenizes the units of each small part (a piece, or an uncompressed
file of at most a unit) as BuildStore writes them; CountRanges (``graph.ranges``) tokenizes the
units left (of a gzip or larger file, and every unit of a ``--train-vocab`` or ``--dedup`` run),
in parallel, before Parse reads any.
"""
from __future__ import annotations

import argparse
import dataclasses
import logging
import time
from collections.abc import Iterator
from typing import Any, NamedTuple

from shardprep import capacity, formats, fs, naming, native
from shardprep.config import ReshardConfig
from shardprep.errors import InputError
from shardprep.formats.base import InputFile, WorkUnit
from shardprep.graph import units as staged_units
from shardprep.graph.elements import Tagged
from shardprep.job import BY_KEY, ONE_GROUP, Job, Stage, planned_job
from shardprep.label_vocab import apply_vocabulary
from shardprep.text import bands, prepare
from shardprep.text.corpus import DedupSettings, sentence_share
from shardprep.text.pretraining import PretrainingConfig
from shardprep.text.spec import CLASSIFICATION, PRETRAINING, TextSpec
from shardprep.text.store import BuildPart, StoreResult, join_store, sentences, store_parts
from shardprep.text.vocab import PROGRESS_SECONDS, Vocab, train_vocab, write_vocab

__all__ = ["BANDS", "BuildStore", "PlanUnits", "StoreSettings", "TextRun", "progress_lines", "stage_text", "text_job",
           "unit_bytes"]

log = logging.getLogger("shardprep")
MIN_UNIT_BYTES, MAX_UNIT_BYTES = 1 << 20, 16 << 20
BANDS = "bands"  # BuildStore's side output of band pieces (--dedup near)


class TextRun(NamedTuple):
    """What the launcher knows of a text run before its store is built: the checked flags
    (``text.prepare.check``), the given vocabulary (None: ``--train-vocab``), the input files, the
    planned units of its CSV / JSON Lines / Parquet files by file index, the longest line read."""

    args: argparse.Namespace
    vocab: Vocab | None
    files: tuple[InputFile, ...]
    column_units: dict[int, list]
    max_line_bytes: int


class StoreSettings(NamedTuple):
    """What PlanUnits needs of the flags: the task, the case, ``--train-vocab``'s size (None: given),
    the label column and the classes given for it, the pre-training settings, ``--dedup``'s."""

    task: str
    cased: bool
    train_vocab: int | None
    label: str | None
    label_classes: tuple[str, ...]
    pretraining: PretrainingConfig
    dedup: DedupSettings


def unit_bytes(total: int, given_mb: float | None) -> int:
    """Store bytes per unit: ``--unit-mb``, else total / 32 within 1-16 MB (a unit's instances are many times its text)."""
    if given_mb is not None:
        return max(1, int(given_mb * 1024 * 1024))
    return max(MIN_UNIT_BYTES, min(MAX_UNIT_BYTES, total // 32))


def _folder(config: ReshardConfig) -> str:
    return naming.join(config.output, naming.spill_folder(config.run_id)) + "/text"


def _parts_url(config: ReshardConfig) -> str:
    return _folder(config) + "/parts.bin"


def text_job(config: ReshardConfig, run: TextRun) -> tuple[Job, list]:
    """The job of a text run (the launcher's: ``shardprep.submit``), and the parts of its store,
    numbered in store order (``(k, (file, column units, piece))``), for ``stage_text``. Reads the
    large local .txt files once to cut them into pieces (``store_parts``); writes nothing."""
    args, files = run.args, run.files
    folder, vocab_url = _folder(config), naming.join(config.output, naming.vocab_path(config.run_id))
    dedup = prepare.dedup_settings(args)
    # a given vocabulary tokenizes the small parts as they are built (not with --dedup: CountRanges tokenizes those kept)
    tokenize = (vocab_url, args.cased) if run.vocab is not None and args.task == PRETRAINING and dedup.mode == "none" \
        else None
    share, part_bytes = sentence_share(sum(f.size for f in files)), unit_bytes(sum(f.size for f in files), args.unit_mb)
    build = BuildPart(folder, part_bytes, (args.text_column, args.text_pair_column, args.label), run.max_line_bytes, formats.read_unit,
                      tokenize, dedup, share)
    settings = StoreSettings(args.task, args.cased, args.train_vocab, args.label,
                             tuple(getattr(args, "label_classes", ()) or ()), prepare.config(args), dedup)
    parts = list(enumerate(store_parts(files, run.column_units, part_bytes)))
    near = dedup.mode == "near"
    buckets = min(bands.BUCKETS, len(parts)) if near else 0
    first = (
        Stage("ExpandParts", staged_units.ExpandUnits(_parts_url(config)), over=("",), spread="DistributeParts"),
        Stage("BuildStore", BuildStore(build, buckets), over=("ExpandParts",), heavy=True, tags=(BANDS,) if near else ()),
        *([Stage("GroupBands", bands.GroupBands(dedup), over=("BuildStore." + BANDS,), group=BY_KEY, heavy=True,
                 labels=("GroupByBand",))] if near else []),
        Stage("PlanUnits", PlanUnits(staged_units.slim(config), settings, share), over=("BuildStore",),
              side=("GroupBands",) if near else (), group=ONE_GROUP, labels=("KeyParts", "GroupParts")),
    )
    return planned_job(config, first, range(staged_units.num_chunks(len(parts)))), parts


def stage_text(config: ReshardConfig, run: TextRun, parts: list) -> None:
    """What a text run's job reads first: the given vocabulary, written into the run's folder (the
    store's parts are tokenized with it; a failed run leaves the committed data set's as it was),
    and the store's parts with the input list (``graph.units.stage``)."""
    prepare.share_vocab(run.vocab, config.output, config.run_id)  # before the engine's processes fork
    if run.vocab is not None:
        write_vocab(list(run.vocab.tokens), naming.join(config.output, naming.vocab_path(config.run_id)))
    staged_units.stage(config, parts, url=_parts_url(config))


class BuildStore:
    """``(k, part)`` in, ``(k, StorePart)`` out: ``text.store.BuildPart`` over the k-th part of the
    store; with ``buckets`` (``--dedup near``), its band pieces too, ``(bucket, text.bands.BandPiece)``
    tagged ``BANDS``."""

    def __init__(self, part: BuildPart, buckets: int = 0) -> None:
        self._part, self._buckets = part, buckets

    def cost(self, element: tuple[int, Any]) -> int:
        """What an element costs, for the order of a pool's tasks (``pipelines.driver``): its bytes."""
        return BuildPart.cost(element[1])

    def process(self, element: tuple[int, Any]) -> Iterator[tuple[int, Any]]:
        k, part = element
        for built in self._part.process(part):
            yield k, built
            if self._buckets:
                yield from (Tagged(BANDS, piece) for piece in bands.write_part(k, built, self._buckets))


class PlanUnits:
    """The built parts in (one group); the store joined, the vocabulary trained if asked, the run's
    units staged with the manifest's ``text`` entry; their chunk numbers out."""

    def __init__(self, config: ReshardConfig, settings: StoreSettings, share: float) -> None:
        self._config, self._settings, self._share = config, settings, share

    def process(self, group: tuple[Any, list], edges: list | None = None) -> Iterator[int]:
        """``edges``: GroupBands' outputs (``--dedup near``)."""
        cfg, s = self._config, self._settings
        parts = [part for _, part in sorted(group[1], key=lambda pair: pair[0])]
        staged = staged_units.read_all(_parts_url(cfg))
        files = list({file.index: file for _, (file, _, _) in staged}.values())
        folder, vocab_url = _folder(cfg), naming.join(cfg.output, naming.vocab_path(cfg.run_id))
        near = bands.merge_edges(edges, s.dedup.bands * s.dedup.rows) if edges is not None else None
        result = join_store(parts, files, folder, share=self._share, dedup=s.dedup, edges=near)
        if result.num_documents == 0:
            raise InputError(f"found no document in the input ({result.stats.bad_lines} bad lines, "
                             f"{result.stats.empty_documents} empty documents"
                             + "".join(f", {n} {r}" for r, n in result.removed.items() if n)
                             + "): check --input and --text-column")
        if s.train_vocab is not None:
            store = f"{folder}/store.jsonl"
            tokens = train_vocab(progress_lines(sentences(store), fs.size(store)), s.train_vocab, cased=s.cased,
                                 progress=log.info)
            log.info("trained a vocabulary of %d tokens", len(tokens))
            written = write_vocab(tokens, vocab_url)
            size = len(tokens)
        else:  # written by the launcher (``stage_text``)
            data = fs.read_bytes(vocab_url)
            written, size = (len(data), f"{native.crc32c(data):08x}"), data.count(b"\n")
        labels = result.labels
        if s.task == CLASSIFICATION and s.label_classes:  # --labels-from / --label-vocab
            labels = apply_vocabulary(s.label_classes, result.labels, what=f"label column {s.label!r}")
        spec = TextSpec(s.task, f"{folder}/store.jsonl", f"{folder}/index.npy", result.num_documents, vocab_url,
                        s.cased, s.pretraining, labels, result.stats.sentences)
        by_index = {f.index: dataclasses.replace(f, format="text", gzip=False, text=spec) for f in files}
        units, count = [], {}
        for u in result.units:
            k = count[u.file_index] = count.get(u.file_index, -1) + 1
            units.append(WorkUnit(by_index[u.file_index], k, u.start, u.end, u.first_doc))
        log.info("%s -> %d work units of the document store", _counts_line(s.task, result), len(units))
        entry = spec.manifest_entry(size, vocab=naming.vocab_path(cfg.run_id), vocab_bytes=written[0],
                                    vocab_crc32c=written[1], corpus=result.corpus.entry(),
                                    dedup={**s.dedup.entry(), "removed": result.removed} if s.dedup.mode != "none" else None)
        config = dataclasses.replace(staged_units.with_sources(cfg, _parts_url(cfg)), text=entry)
        staged_units.stage(config, units)
        capacity.log_bound(config, units)
        yield from range(staged_units.num_chunks(len(units)))


def _counts_line(task: str, result: StoreResult) -> str:
    """The store's counts for the log: documents and sentences, or a classification run's examples."""
    s, c = result.stats, result.corpus
    if task == CLASSIFICATION:
        line = f"{s.documents:,} examples"
    else:
        line = f"{s.documents:,} documents, {s.sentences:,} sentences"
    line += f", {s.bad_lines:,} bad lines"
    if c.exact_duplicate_documents:
        line += f"; {c.exact_duplicate_documents:,} documents are exact copies of another"
    if c.sentences_sampled and task == PRETRAINING:
        line += f"; {100 * c.sentences_repeated / c.sentences_sampled:.1f}% of sentences occur more than once"
    removed = [f"{n:,} {r.replace('_', '-')}s" for r, n in result.removed.items() if n]
    if result.removed:
        line += f"; --dedup removed {' and '.join(removed) if removed else 'nothing'}"
    return line


def progress_lines(lines: Iterator[str], total: int, every: float = PROGRESS_SECONDS) -> Iterator[str]:
    """``lines`` as they are, logging about every ``every`` seconds how far through ``total`` bytes of
    text (UTF-8, counted from the lines) the pass is."""
    done, last, start = 0, time.monotonic(), time.monotonic()
    for line in lines:
        done += len(line.encode("utf-8")) + 1
        if time.monotonic() - last >= every:
            last = time.monotonic()
            log.info("--train-vocab: read %.0f of %.0f MB of text (%.0f%%, %.0f s)", done / 1e6, total / 1e6,
                     min(100.0, 100 * done / max(1, total)), last - start)
        yield line
