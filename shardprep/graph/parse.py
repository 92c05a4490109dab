"""The Parse step: one work unit in; spilled record batches by split, dead letters and a UnitFact out."""
from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from shardprep import formats, framing, planning, writer
from shardprep.config import ReshardConfig
from shardprep.example import RecordError, example_encoder
from shardprep.example.columnar import ColumnBatch
from shardprep.formats import Bad, Unsupported, WorkUnit
from shardprep.formats.base import Decoded, row_text
from shardprep.formats.cuts import CutTable, RangeCount, resolve
from shardprep.framing import FramedBatch
from shardprep.graph.counting import Counter
from shardprep.graph.duplicates import UnitHashes, hashes_url
from shardprep.graph.elements import FACTS, REJECTED, STATS, RejectedBatch, Tagged, UnitFact
from shardprep.graph.spill import joined, pack
from shardprep.graph.tasks import helper
from shardprep.malloc import freeze_startup_objects
from shardprep.stats import columns as stats_columns

__all__ = ["Parse"]

log = logging.getLogger("shardprep")
PROGRESS_S = 10.0


class Parse:
    """Reads one work unit, encodes its records, assigns splits; bad records become dead letters.

    A nominal unit (a byte range of a large CSV / JSON Lines file) is first resolved to its exact
    cuts and first line from the ``CountRanges`` side input (``graph.ranges``, ``formats.cuts``).
    A ``FileGroup`` (many small files, ``formats.grouping``) is read member after member, each as
    its own unit (its dead letters name it); their records fill batches together, so a group
    spills a file per batch and split, not per file.

    Emits ``SpilledBatch`` elements, ``RejectedBatch`` dead letters (tag ``REJECTED``), one
    ``UnitFact`` (tag ``FACTS``) and, where they are counted here (``statistics_in_parse``), the
    unit's partial statistics per split (tag ``STATS``). The record bytes go through spill files,
    not through the runner; with ``--dedup exact``, so do their hashes (``graph.duplicates.UnitHashes``).
    """

    def __init__(self, config: ReshardConfig) -> None:
        self._config = config
        self._records = Counter("records_read")
        self._rejects = Counter("records_rejected")
        self._bytes = Counter("bytes_encoded")

    @staticmethod
    def cost(unit: WorkUnit) -> int:
        """What an element costs, for the order of a pool's tasks (``pipelines.driver``): a text unit's
        bytes of the document store; 0 (the order planned) for the others, whose ranges may count rows."""
        return unit.end - unit.start if unit.file.text is not None else 0

    def setup(self) -> None:
        freeze_startup_objects()
        cfg = self._config
        self._schema = cfg.schema
        self._missing: dict[str, int] = {}  # per unit: rows that left each feature out (a missing value)
        self._row_encoder = None  # built on first use: column-wise readers never need it (a wide table's is slow to build)
        self._thresholds = planning.split_thresholds(cfg.splits)
        self._split_index = {s.name: i for i, s in enumerate(cfg.splits)}  # for files with a fixed split (TFDS)
        self._started = time.monotonic()
        self._next_progress = self._started
        self._total = 0
        self._told_fallback = False  # a unit of this process left the column-wise path (logged once at INFO)
        self._cuts: CutTable | None = None  # from the CountRanges side input, built on first use
        # the unit's statistics, batch after batch in the order read, waited for at the unit's end
        self._counting = helper(stats_columns.COUNTING_THREAD)

    def teardown(self) -> None:
        self._counting.close()

    def _encoder(self) -> Callable[[dict], bytes]:
        """The per-record encoder (row -> Example bytes, ``RecordError`` for a bad value), built on first use."""
        if self._row_encoder is None:
            cfg = self._config
            self._row_encoder = example_encoder(self._schema, extra_fields=cfg.extra_fields,
                                                allow_non_finite=cfg.allow_non_finite, on_missing=cfg.on_missing,
                                                required=cfg.required, missing=self._missing)
        return self._row_encoder

    def _batches(self, unit: WorkUnit, grouped: bool = False) -> Iterator[list[FramedBatch] | Bad]:
        """The unit's records in file order: batches (as the blocks they were read in: joining them
        would copy every byte once more), and ``Bad`` records.

        A format with a column-wise reader that takes this unit (CSV: ``formats.csv.arrow``) reads
        it while it can; from the first batch it cannot take, the per-record path reads the unit,
        skipping the records already given, and decides. TFRecord's reader takes every unit: it
        passes conforming records through and gives the rest as ``Bad`` or ``Decoded`` rows, which
        the per-record encoder decides here. A small file of a group (``grouped``) goes to the
        per-record path where its format says so (``Format.column_wise_min_bytes``).
        """
        fmt = formats.format_of(unit)
        limit, max_bytes = self._config.batch_records, self._config.batch_bytes
        done, pending, waiting, held = 0, [], 0, 0  # held: the bytes of the pending blocks
        fast = (not grouped or unit.file.size >= fmt.column_wise_min_bytes) and fmt.column_wise(
            unit, self._schema, self._config.extra_fields)
        if fast:
            run: list[bytes] = []  # consecutive records the encoder re-encoded: one block, not one each
            run_bytes = 0
            try:
                for block in fmt.framed_batches(unit, self._schema, self._config.extra_fields):
                    if isinstance(block, Decoded):  # a record the column-wise reader leaves to the encoder (TFRecord)
                        block = self._encoded(block.position, block.row)
                        if not isinstance(block, Bad):
                            run.append(block)
                            run_bytes += len(block)
                            if waiting + len(run) < limit and held + run_bytes < max_bytes:
                                continue
                            block, run, run_bytes = joined(run), [], 0
                    if run:
                        pending.append(joined(run))
                        waiting, held, run, run_bytes = waiting + len(run), held + run_bytes, [], 0
                    if isinstance(block, Bad):  # a record the column-wise reader already judged (TFRecord)
                        yield block  # the batch goes on: a record's place is its order in the unit, not its batch
                        done += 1
                        continue
                    if isinstance(block, ColumnBatch):
                        self._count_columns(block)
                    pending.append(block)  # blocks of a few MB, gathered into batches as large as the per-record path's
                    waiting, held = waiting + len(block.ends), held + len(block.blob)
                    if waiting >= limit or held >= max_bytes:
                        yield pending
                        done, pending, waiting, held = done + waiting, [], 0, 0
                if run:
                    pending.append(joined(run))
                    waiting += len(run)
            except Unsupported as e:
                fast = False
                # the first unit of a process at INFO, the others with --verbose: many small files that
                # all fall back give a line a process, not one a file
                log.log(logging.DEBUG if self._told_fallback else logging.INFO,
                        "%s unit %d: per-record path from record %d on (%s)%s", unit.file.url, unit.index,
                        done + waiting + 1, e, "" if self._told_fallback else "; other units' fallbacks with --verbose")
                self._told_fallback = True
        if pending:
            yield pending
            done += waiting
        if fast:
            return
        encode, frame = self._encoder(), framing.frame
        framed: list[bytes] = []
        held = 0
        for position, row in itertools.islice(formats.read_unit(unit), done, None):
            if isinstance(row, Bad):
                yield row
                continue
            try:
                framed.append(frame(encode(row)))
            except RecordError as e:
                yield Bad(position, e.reason, e.detail, row_text(row))
                continue
            held += len(framed[-1])
            if len(framed) >= limit or held >= max_bytes:
                yield [joined(framed)]
                framed, held = [], 0
        if framed:
            yield [joined(framed)]

    def _count_columns(self, block: ColumnBatch) -> None:
        """Holds a column-wise block's columns for its statistics, counted ``stats_columns.COLUMN_ROWS``
        rows (or ``COLUMN_BYTES`` of records) at a time (``_count_held``); the block holds its records'
        splits instead, for ``_by_split``."""
        if self._config.statistics and self._config.statistics_in_parse and block.columns is not None:
            block.which = _splits(block, self._config.seed, self._thresholds) if not self._unit.file.split else None
            self._held.append((block.columns, block.which, len(block.ends)))
            self._held_rows += len(block.ends)
            self._held_bytes += len(block.blob)
            if self._held_rows >= stats_columns.COLUMN_ROWS or self._held_bytes >= stats_columns.COLUMN_BYTES:
                self._count_held()
        block.columns = None

    def _count_held(self) -> None:
        """The statistics of the held column-wise blocks, per split, as one batch (on the counting thread)."""
        if self._held:
            fixed = self._unit.file.split
            self._counting.submit(stats_columns.add_blocks, self._partial, self._held,
                                  self._split_index[fixed] if fixed else 0, self._schema)
            self._held, self._held_rows, self._held_bytes = [], 0, 0

    def _count(self, s: int, piece: FramedBatch) -> None:
        """The statistics of records that came as Examples (the per-record path's, here), on the
        counting thread."""
        self._counting.submit(_add_framed, self._partial, s, piece, self._schema)

    def _encoded(self, position: int, row: dict) -> bytes | Bad:
        """One row through the per-record encoder: its framed record, or its dead letter."""
        try:
            return framing.frame(self._encoder()(row))
        except RecordError as e:
            return Bad(position, e.reason, e.detail, row_text(row))

    def process(self, unit: WorkUnit, ranges: list[RangeCount] = ()) -> Iterator[Any]:
        empty = False
        if unit.nominal:  # a large line file's nominal range: its cuts from the range counts (formats.cuts)
            if self._cuts is None:
                self._cuts = CutTable(ranges)
            unit = resolve(unit, self._cuts)
            empty = unit.start >= unit.end  # its records all start in the unit before (a record longer than a unit)
        cfg = self._config
        self._parts = [0] * len(cfg.splits)
        self._kept = [0] * len(cfg.splits)
        self._pending: list[FramedBatch] = []  # records read, not yet spilled: they wait to fill a batch
        self._waiting = self._waiting_bytes = 0
        dead: list[bytes] = []
        reasons: dict[str, int] = {}
        read = 0
        per_file: list[tuple[int, int, int]] = []  # a group's (file, read, rejected) per member
        self._missing.clear()
        self._hashes = UnitHashes(cfg.dedup_key) if cfg.dedup == "exact" else None
        self._partial = partial = {}  # split -> feature -> its statistics in this unit
        self._held: list[tuple[dict, np.ndarray | None, int]] = []  # column-wise blocks not yet counted
        self._held_rows = self._held_bytes = 0  # their records, and their records' bytes
        for member in () if empty else unit.members:  # a FileGroup's files one after another, each as its own unit
            self._unit = member
            before = (read, len(dead))
            if self._hashes is not None:
                self._hashes.member(member, read - len(dead))
            for item in self._batches(member, member is not unit):
                if isinstance(item, Bad):
                    read += 1
                    reasons[item.reason] = reasons.get(item.reason, 0) + 1
                    dead.append(writer.dead_letter_line(source=member.file.url, position=item.position,
                                                        unit=f"{member.file.index}:{member.index}",
                                                        reason=item.reason, detail=item.detail, raw=item.raw))
                    continue
                read += self._add(item)
                if self._waiting >= cfg.batch_records or self._waiting_bytes >= cfg.batch_bytes:
                    yield from self._spill(unit)
            if member is not unit:
                per_file.append((member.file.index, read - before[0], len(dead) - before[1]))
        yield from self._spill(unit)
        if self._hashes is not None and read > len(dead):
            self._hashes.write(hashes_url(cfg, unit.key))
        if dead:
            yield Tagged(REJECTED, RejectedBatch(unit.key, dead))
        self._count_held()
        self._counting.wait()
        for s in sorted(partial):
            yield Tagged(STATS, (s, partial[s]))
        yield Tagged(FACTS, UnitFact(unit.key, unit.file.index, read, len(dead), tuple(self._kept),
                                     tuple(sorted(reasons.items())), tuple(sorted(self._missing.items())),
                                     tuple(per_file)))
        self._records.inc(read)
        self._rejects.inc(len(dead))
        self._total += read
        # A progress line at most every PROGRESS_S per process (each worker process logs its own);
        # every unit's line with --verbose. The run ends with one summary per stage.
        now = time.monotonic()
        level = logging.INFO if now >= self._next_progress else logging.DEBUG
        self._next_progress = now + PROGRESS_S if level == logging.INFO else self._next_progress
        what = (f"{len(per_file)} files from {unit.file.url}" if per_file else
                f"{unit.file.url} unit {unit.index} [{unit.start}, {unit.end})")
        log.log(level, "parsed %s: %d records, %d rejected (%d so far in this worker, %.0f/s)",
                what, read, len(dead), self._total, self._total / max(now - self._started, 1e-9))

    def _add(self, blocks: list[FramedBatch]) -> int:
        """Holds a batch's blocks of the member being read, to spill with the next ones (``_spill``);
        returns their records."""
        if len(blocks) == 1:  # a small file's one block
            records, size = len(blocks[0].ends), len(blocks[0].blob)
        else:
            records, size = sum(len(block.ends) for block in blocks), sum(len(block.blob) for block in blocks)
        self._bytes.inc(size)
        self._pending.extend(blocks)
        self._waiting += records
        self._waiting_bytes += size
        return records

    def _spill(self, unit: WorkUnit) -> Iterator[Any]:
        """The held blocks cut by split and spilled, one batch per split, in order (the unit's
        records, a group's files after one another: their order in the split is their input order)."""
        cfg = self._config
        blocks, self._pending, self._waiting, self._waiting_bytes = _merged(self._pending), [], 0, 0
        pieces: dict[int, list[FramedBatch]] = {}  # by split: its records of the batch, in order
        marks: dict[int, list[np.ndarray]] = {}  # by split: its records' hash rows (--dedup exact), in order
        fixed = unit.file.split  # a TFDS shard keeps its split (a group's files share it); others: the keyed hash
        for block in blocks:
            counted = isinstance(block, ColumnBatch)  # its statistics came from its columns
            marked = self._hashes.mark(block) if self._hashes is not None else None
            for s, piece, mask in [(self._split_index[fixed], block, None)] if fixed else _by_split(block, cfg.seed,
                                                                                                    self._thresholds):
                pieces.setdefault(s, []).append(piece)
                if marked is not None:
                    marks.setdefault(s, []).append(marked if mask is None else marked[mask])
                if cfg.statistics and cfg.statistics_in_parse and not counted:
                    self._count(s, piece)
        for s in sorted(pieces):
            spilled = pack(cfg, s, unit.key, self._parts[s], pieces[s])
            if self._hashes is not None:
                self._hashes.batch(s, self._parts[s], marks[s])
            yield spilled
            self._kept[s] += sum(len(piece.ends) for piece in pieces[s])
            self._parts[s] += 1


def _merged(blocks: list[FramedBatch]) -> list[FramedBatch]:
    """``blocks`` with each run of several per-record blocks (a group's small files give one each)
    joined into one, so that it is cut by split and counted once; column-wise blocks as they are."""
    out: list[FramedBatch] = []
    run: list[FramedBatch] = []
    for block in [*blocks, None]:
        if block is not None and type(block) is FramedBatch:
            run.append(block)
            continue
        if len(run) > 1:  # each block's ends moved by the bytes before it: numpy calls per run, not per block
            offsets = np.cumsum([0] + [len(b.blob) for b in run[:-1]], dtype=np.uint64)
            ends = np.concatenate([b.ends for b in run]).astype(np.uint64)
            ends += np.repeat(offsets, [len(b.ends) for b in run])
            out.append(FramedBatch(b"".join(bytes(b.blob) for b in run), ends))
        else:
            out.extend(run)
        run = []
        if block is not None:
            out.append(block)
    return out


def _add_framed(partial: dict[int, dict], split: int, piece: FramedBatch, features: dict) -> None:
    """Adds the statistics of a batch of framed Examples, all of ``split``, to ``partial``."""
    stats_columns.add_framed(partial.setdefault(split, {}), piece.blob, piece.ends, features)


def _splits(batch: FramedBatch, seed: int, thresholds: tuple[int, ...]) -> np.ndarray | None:
    """Each record's split (a keyed hash of its Example's bytes), or None where there is one split."""
    if len(thresholds) == 1:
        return None
    ends = batch.ends.astype(np.int64)
    starts = np.concatenate(([0], ends[:-1]))
    return planning.split_indices(batch.blob, starts + 12, ends - 4, seed, thresholds)  # the Examples, unframed


def _by_split(batch: FramedBatch, seed: int,
              thresholds: tuple[int, ...]) -> list[tuple[int, FramedBatch, np.ndarray | None]]:
    """A framed batch cut by split, records kept in order (``ColumnBatch``: by the splits it holds):
    each split's records and which of the batch's they are (None: all)."""
    which = batch.which if isinstance(batch, ColumnBatch) and batch.which is not None else _splits(batch, seed,
                                                                                                    thresholds)
    if which is None:
        return [(0, batch, None)]
    ends = batch.ends.astype(np.int64)
    starts = np.concatenate(([0], ends[:-1]))
    present = np.flatnonzero(np.bincount(which)).tolist()  # the splits present, in order
    if len(present) == 1:
        return [(present[0], batch, None)]
    data, sizes = np.frombuffer(batch.blob, np.uint8), ends - starts
    out = []
    for s in present:
        keep = which == s
        out.append((s, FramedBatch(data[np.repeat(keep, sizes)].tobytes(), np.cumsum(sizes[keep]).astype(np.uint64)), keep))
    return out
