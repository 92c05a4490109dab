"""``--dedup exact`` inside the re-shard's stages: Parse hashes, Assign decides and drops.

Parse (``UnitHashes``) gives each record it spills a row of four uint64: its 128-bit hash
(``record_hashes``), its ordinal among its unit's records (the high bit set for a record without
the ``--dedup-key`` feature, never a duplicate) and its framed length; at the unit's end it writes
them, batch after batch, to the spill file ``hashes-<file>-<unit>.bin`` with the unit's members
(their files, first positions and dead letters' positions, which give a record's position in its
file). Nothing per record crosses the runner.

Assign (``Duplicates``, before the shard plan; decided once for the run by the first process to
claim it, which spills the decision, ``duplicates.bin``, for the others: ``graph.once``): every
unit's rows and the data set's generations' hashes (an append: ``ReshardConfig.dedup_against``),
one sort of the rows by hash (``record_hashes.order_ties``). A record whose hash an
earlier generation holds, or an earlier record of the run holds (lower input position: unit in
(file, unit) order, then ordinal), is dropped: the same rule and bytes on every engine and worker
count. The plan counts the kept records (``counts``); the Assign of a batch that holds dropped
records writes them as dead letters ``duplicate`` naming the record kept (a record's ``position``
here: its index among the records of its file that parse, from 0; other dead letters give the
format's own, a line for CSV), rewrites the batch's spill file without them (``drop``) and reports
a ``graph.elements.DuplicateFact``. The deciding process stores the kept records' hashes for the
generation (``record_hashes.write``); the Assign of the run's first batch reports them
(``HashesFact``). A process that decides nothing and drops nothing never reads the units' rows.
"""
from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import numpy as np

from shardprep import fs, naming, record_hashes, writer
from shardprep.config import ReshardConfig
from shardprep.formats.base import WorkUnit
from shardprep.framing import FramedBatch
from shardprep.graph import once
from shardprep.graph.elements import BatchCount, DuplicateFact, HashesFact, RejectFact, SpilledBatch
from shardprep.graph.spill import ends_dtype, gather, spill, spill_url
from shardprep.manifest_generations import HashesInfo

__all__ = ["NO_KEY", "ROW", "Duplicates", "UnitHashes", "dropped_any", "hashes_url"]

NO_KEY = np.uint32(1 << 31)  # in a row's ordinal: the record lacks the --dedup-key feature
_MAGIC = 0x3248_5344_5053  # "SPDSH2": a unit's hashes file
# a record's row: its hash, its ordinal in its unit (a unit holds under 2**31 records) and its framed
# length (under 4 GiB: ``formats.base.MAX_RECORD_BYTES``)
ROW = np.dtype([("hash", "<u8", (2,)), ("ordinal", "<u4"), ("length", "<u4")])


def hashes_url(config: ReshardConfig, unit: tuple[int, int]) -> str:
    """Where Parse writes unit ``unit``'s rows."""
    return spill_url(config, "hashes", file=unit[0], unit=unit[1])


class UnitHashes:
    """One unit's rows, as Parse spills its batches (``mark`` each block read, in order; ``batch``
    each batch spilled); ``member`` records where each record lies in its file."""

    def __init__(self, key: str) -> None:
        self._key = key
        self._next = 0  # the ordinal of the next record marked
        self._batches: list[tuple[int, int, np.ndarray]] = []
        self._members: list[list[int]] = []  # [first ordinal, file, unit]
        self._urls: list[str] = []

    def member(self, unit: WorkUnit, first: int) -> None:
        """Member ``unit`` of the unit starts at ordinal ``first`` (records read before it, not rejected)."""
        self._members.append([first, unit.file.index, unit.index])
        self._urls.append(unit.file.url)

    def mark(self, block: FramedBatch) -> np.ndarray:
        """The rows of a block of records read, in order."""
        ends = np.asarray(block.ends, np.uint64)
        n = len(ends)
        out = np.empty(n, ROW)
        out["ordinal"] = np.arange(self._next, self._next + n, dtype=np.uint32)
        self._next += n
        if self._key:
            out["hash"], present = record_hashes.of_keys(block.blob, ends, self._key)
            out["ordinal"][~present] |= NO_KEY
        else:
            out["hash"] = record_hashes.of_framed(block.blob, ends)
        out["length"] = np.diff(ends, prepend=np.uint64(0))
        return out

    def batch(self, split: int, part: int, rows: list[np.ndarray]) -> None:
        """Batch ``part`` of ``split`` was spilled with the records of ``rows``, in order."""
        self._batches.append((split, part, np.concatenate(rows) if rows else np.zeros(0, ROW)))

    def write(self, url: str) -> None:
        head = [_MAGIC, len(self._batches), len(self._members), self._next]
        for split, part, rows in self._batches:
            head += [split, part, len(rows)]
        for m in self._members:
            head += m
        spill(url, np.asarray(head, "<u8").tobytes(), *(r.tobytes() for _, _, r in self._batches),
              json.dumps(self._urls).encode())


class _Unit(NamedTuple):
    """A unit's hashes file read back: its batches ((split, part, records)), members, records."""

    batches: list[tuple[int, int, int]]
    members: np.ndarray  # int64 rows of first ordinal, file, unit
    urls: list[str]
    rows: np.ndarray
    records: int  # the unit's records that parsed


def _read_unit(url: str) -> _Unit:
    data = fs.read_bytes(url)
    head = np.frombuffer(data, "<u8", count=4).astype(np.int64)
    if int(head[0]) != _MAGIC:
        raise RuntimeError(f"{url} is not a unit's hashes file: the spill is corrupt")
    b, m, _ = head[1:].tolist()
    nums = np.frombuffer(data, "<u8", count=4 + 3 * b + 3 * m).astype(np.int64)
    batches = [tuple(x) for x in nums[4:4 + 3 * b].reshape(-1, 3).tolist()]
    members = nums[4 + 3 * b:].reshape(-1, 3)
    at = 8 * len(nums)
    count = sum(n for _, _, n in batches)
    rows = np.frombuffer(data, ROW, count=count, offset=at)
    return _Unit(batches, members, json.loads(data[at + ROW.itemsize * count:]), rows, int(head[3]))


class _Dropped(NamedTuple):
    """A batch's dropped records: their indices in the batch (ascending), rows in the run, and bytes."""

    index: np.ndarray
    rows: np.ndarray
    size: int


class _Decision(NamedTuple):
    """What ``Duplicates`` decides, computed by one process and spilled for the others
    (``graph.once``): the dropped rows (ascending), what each repeats (``Duplicates._decide``'s
    values) and its framed length; the run's batches (keys (split, file, unit, part) and first rows);
    the generation's stored hashes."""

    dropped: np.ndarray
    kept_of: np.ndarray
    lengths: np.ndarray
    keys: np.ndarray  # (batches, 4)
    starts: np.ndarray
    hashes: HashesInfo


def _encode(d: _Decision) -> bytes:
    head = json.dumps({"dropped": len(d.dropped), "batches": len(d.starts), "hashes": d.hashes.to_json()}).encode()
    arrays = (d.keys, d.starts, d.dropped, d.kept_of, d.lengths)
    return np.uint64(len(head)).astype("<u8").tobytes() + head + b"".join(
        np.ascontiguousarray(a, "<i8").tobytes() for a in arrays)


def _decode(data: bytes) -> _Decision:
    size = int(np.frombuffer(data, "<u8", count=1)[0])
    head = json.loads(data[8:8 + size])
    n, b = head["dropped"], head["batches"]
    nums = np.frombuffer(data, "<i8", offset=8 + size).astype(np.int64)
    rest = nums[5 * b:]
    return _Decision(rest[:n], rest[n:2 * n], rest[2 * n:3 * n], nums[:4 * b].reshape(-1, 4), nums[4 * b:5 * b],
                     HashesInfo(**head["hashes"]))


def dropped_any(config: ReshardConfig) -> bool:
    """Whether the run drops any record (its decision, spilled by ``Duplicates``; none made: no
    record reached Assign): then the statistics Parse counted include records not written, and
    those of the shards written replace them (``graph.stages.MergeStats``)."""
    return _dropped_any(spill_url(config, "duplicates"))


@functools.lru_cache(maxsize=4)
def _dropped_any(url: str) -> bool:
    try:
        data = fs.read_bytes(url)
    except FileNotFoundError:
        return False
    size = int(np.frombuffer(data, "<u8", count=1)[0])
    return json.loads(data[8:8 + size])["dropped"] > 0


class Duplicates:
    """Which records of the run ``--dedup exact`` drops, from every unit's hashes file and the data
    set's generations' hashes: decided by the first process to claim it, which also stores the
    generation's hashes, and read by the others (``graph.once``; the same whoever decides). A
    process reads the units' rows only where it decides or drops records (their dead letters)."""

    def __init__(self, config: ReshardConfig, counts: Iterable[BatchCount]) -> None:
        self._config = config
        self._unit_keys = sorted({(int(c.unit[0]), int(c.unit[1])) for c in counts})
        self._units: list[_Unit] | None = None
        self._kept_of: np.ndarray | None = None
        self._decision = d = once.shared(spill_url(config, "duplicates"), self._decided, encode=_encode, decode=_decode)
        self._by_batch: dict[tuple[int, int, int, int], _Dropped] = {}
        batch = np.searchsorted(d.starts, d.dropped, "right") - 1
        for b in np.unique(batch).tolist():
            mine = batch == b
            self._by_batch[tuple(d.keys[b].tolist())] = _Dropped(d.dropped[mine] - d.starts[b], d.dropped[mine],
                                                                 int(d.lengths[mine].sum()))

    def _load(self) -> None:
        """Reads every unit's rows: the run's rows, units in (file, unit) order, a unit's batches in
        the order spilled."""
        if self._units is not None:
            return
        urls = [hashes_url(self._config, u) for u in self._unit_keys]
        if all(fs.is_local(u) for u in urls):
            self._units = [_read_unit(u) for u in urls]
        else:
            with ThreadPoolExecutor(16) as pool:
                self._units = list(pool.map(_read_unit, urls))
        self._batch_keys: list[tuple[int, int, int, int]] = []
        unit_starts, batch_starts, at = [], [], 0
        for key, unit in zip(self._unit_keys, self._units):
            unit_starts.append(at)
            for split, part, n in unit.batches:
                self._batch_keys.append((split, key[0], key[1], part))
                batch_starts.append(at)
                at += n
        self._rows = np.concatenate([u.rows for u in self._units]) if self._units else np.zeros(0, ROW)
        self._unit_starts = np.asarray(unit_starts, np.int64)
        self._batch_starts = np.asarray(batch_starts, np.int64)
        self._offsets = self._file_offsets()

    def _decided(self) -> _Decision:
        """The decision, made here: every unit's rows read and sorted once; the generation's hashes stored."""
        self._load()
        self._kept_of = self._decide()
        dropped = np.flatnonzero(self._kept_of != -1)
        cfg = self._config
        hashes = record_hashes.write(cfg.output, cfg.run_id, self.kept_hashes(), cfg.dedup_key)
        keys = np.asarray(self._batch_keys, np.int64).reshape(-1, 4)
        return _Decision(dropped, self._kept_of[dropped], self._rows["length"][dropped].astype(np.int64), keys,
                         self._batch_starts, hashes)

    def _file_offsets(self) -> list[list[int]]:
        """For each unit's members: the records of its file that parsed in the units before it."""
        seen: dict[int, int] = {}
        out = []
        for unit in self._units:
            firsts = unit.members[:, 0].tolist() + [unit.records]
            mine = []
            for m, file in enumerate(unit.members[:, 1].tolist()):
                mine.append(seen.get(file, 0))
                seen[file] = mine[-1] + firsts[m + 1] - firsts[m]
            out.append(mine)
        return out

    def _decide(self) -> np.ndarray:
        """For each row: -1 (kept), the row it repeats (an earlier record of the run), or ``-2 - g``
        (a record of generation ``g`` of ``config.dedup_against``). Keeps the keyed rows' order by
        hash (``record_hashes.order_ties``: one value sort), which also gives the kept hashes sorted."""
        hashes, ordinals = self._rows["hash"], self._rows["ordinal"]
        kept_of = np.full(len(hashes), -1, np.int64)
        keyed = (ordinals & NO_KEY) == 0
        every = bool(keyed.all())  # no record lacks the key: slices, not gathers, of a million rows
        idx = np.arange(len(hashes)) if every else np.flatnonzero(keyed)
        mine = hashes if every else np.take(hashes, idx, axis=0)
        self._by_hash, near = record_hashes.order_ties(mine)
        self._mine, self._keyed = mine, idx
        near = self._by_hash[near]  # rows whose first words share their high bits, in hash order: any repeat
        ordered = np.take(mine, near, axis=0)
        same = (ordered[1:, 0] == ordered[:-1, 0]) & (ordered[1:, 1] == ordered[:-1, 1])
        if same.any():  # equal hashes: the group's first record in input order is kept
            grouped = np.zeros(len(near), bool)
            grouped[1:] |= same
            grouped[:-1] |= same
            c = idx[near[grouped]]
            c = c[np.lexsort((ordinals[c], self._unit_of(c), hashes[c, 1], hashes[c, 0]))]
            starts = np.ones(len(c), bool)
            starts[1:] = np.any(hashes[c[1:]] != hashes[c[:-1]], axis=1)
            first = c[np.maximum.accumulate(np.where(starts, np.arange(len(c)), 0))]
            kept_of[c[~starts]] = first[~starts]
        for g, info in enumerate(self._config.dedup_against):
            table = record_hashes.read(self._config.output, info, field=f"generations[{g}].hashes")
            hit = record_hashes.contains(table, mine)
            kept_of[idx[hit]] = -2 - g
        return kept_of

    def _unit_of(self, rows: np.ndarray) -> np.ndarray:
        """The rank (in (file, unit) order) of the unit of each of ``rows``."""
        return np.searchsorted(self._unit_starts, rows, "right") - 1

    @property
    def count(self) -> int:
        return sum(len(d.index) for d in self._by_batch.values())

    def counts(self, counts: Iterable[BatchCount]) -> list[BatchCount]:
        """The counts side input with each batch's kept records and bytes."""
        out = []
        for c in counts:
            d = self._by_batch.get((c.split, int(c.unit[0]), int(c.unit[1]), c.part))
            out.append(c if d is None else c._replace(num_records=c.num_records - len(d.index), size=c.size - d.size))
        return out

    def kept_hashes(self) -> np.ndarray:
        """The kept records' hashes (``record_hashes.sorted_unique``): the generation's, taken in
        the hash order ``_decide`` found (read back from its file where another process decided)."""
        if self._kept_of is None:
            return record_hashes.read(self._config.output, self._decision.hashes, field="the run's record hashes")
        keep = self._kept_of[self._keyed] == -1
        rows = self._by_hash if keep.all() else self._by_hash[keep[self._by_hash]]
        return record_hashes.unique_sorted(np.take(self._mine, rows, axis=0))

    def store(self) -> HashesFact:
        """The fact naming the generation's hashes (stored in the run folder by the process that decided)."""
        return HashesFact(self._decision.hashes)

    def _where(self, row: int) -> tuple[str, int, str]:
        """(source url, position in it, unit name) of row ``row``'s record."""
        rank = int(self._unit_of(np.array([row]))[0])
        unit = self._units[rank]
        ordinal = int(self._rows["ordinal"][row] & ~NO_KEY)
        m = int(np.searchsorted(unit.members[:, 0], ordinal, "right")) - 1
        first, file, index = unit.members[m].tolist()
        return unit.urls[m], self._offsets[rank][m] + ordinal - first, f"{file}:{index}"

    def _detail(self, row: int) -> str:
        what = f"the same {self._config.dedup_key!r} value" if self._config.dedup_key else "the same Example bytes"
        d = self._decision
        kept = int(d.kept_of[np.searchsorted(d.dropped, row)])
        if kept <= -2:
            g = -2 - kept
            return f"{what} as a record already in the data set (generation {g + 1}, {self._config.dedup_against[g].path})"
        source, position, _ = self._where(kept)
        return f"{what} as record {position} of {source}, kept"

    def drop(self, batch: SpilledBatch) -> tuple[SpilledBatch, list]:
        """``batch`` without its dropped records (its spill file rewritten once; a retry finds it
        rewritten, or cut to its ends by ``graph.spill.reorder``, and keeps it), and the facts of
        its dead letters (none where it drops nothing)."""
        key = (batch.split, int(batch.unit[0]), int(batch.unit[1]), batch.part)
        d = self._by_batch.get(key)
        if d is None:
            return batch, []
        self._load()  # where the dropped records and those kept lie in their files
        cfg = self._config
        path = naming.duplicates_path(cfg.run_id, *key)
        n = batch.num_records
        width = np.dtype(ends_dtype(batch.size)).itemsize
        if fs.size(batch.url) == batch.size + n * width:  # as Parse wrote it
            data = fs.read_bytes(batch.url)
            ends = np.frombuffer(data, ends_dtype(batch.size), count=n, offset=batch.size).astype(np.uint64)
            starts = np.concatenate(([0], ends[:-1])).astype(np.int64)
            lines = []
            for i, row in zip(d.index.tolist(), d.rows.tolist()):
                source, position, unit = self._where(row)
                lines.append(writer.dead_letter_line(source=source, position=position, unit=unit, reason="duplicate",
                                                     detail=self._detail(row), raw=data[starts[i] + 12:int(ends[i]) - 4]))
            writer.write_rejected(cfg.output, path, lines)
            keep = np.ones(n, bool)
            keep[d.index] = False
            order = np.flatnonzero(keep)
            kept_ends = np.cumsum(np.diff(ends, prepend=np.uint64(0))[order], dtype=np.uint64)
            size = batch.size - d.size
            spill(batch.url, gather(data[:batch.size], ends, order), kept_ends.astype(ends_dtype(size)).tobytes())
        files: dict[int, int] = {}
        for row in d.rows.tolist():
            file = self._file_of(row)
            files[file] = files.get(file, 0) + 1
        facts = [RejectFact(path, len(d.index)),
                 DuplicateFact(key, batch.split, len(d.index), path, tuple(sorted(files.items())))]
        return batch._replace(num_records=n - len(d.index), size=batch.size - d.size), facts

    def _file_of(self, row: int) -> int:
        unit = self._units[int(self._unit_of(np.array([row]))[0])]
        m = int(np.searchsorted(unit.members[:, 0], int(self._rows["ordinal"][row] & ~NO_KEY), "right")) - 1
        return int(unit.members[m, 1])

