"""Spill files: where a batch's record bytes wait between stages, and framed-batch helpers.

Spill files live under the run's own folder (removed at commit, and on every failure by
``retention.discard_run``), and on shared storage whenever the output is (Dataflow, remote Dask).
The run holds at most one copy of the data in spill: Parse writes ``parsed-*.bin``, a batch's
framed records back to back, then their ends (4 bytes a record below 4 GiB a batch: ``ends_dtype``),
one file a batch (a run of many small files creates one file a unit, not two). On local (and NFS) spill that fits in memory, WriteShards gathers
each shard's records straight from the parsed files, mapped into memory (``in_place``,
``record_bounds``, ``place``, ``scatter_in_place``), so the record bytes are written to spill once. Elsewhere
(GCS, where a read per record would cost a request, or a spill larger than the memory the page
cache may hold: ``shardprep.capacity.spill_bytes``), Assign turns each parsed file into its ``sorted-*`` reordering
(one segment per shard: the records' lengths, then the records; ``reorder``, ``segment``) and
cuts the parsed one down to its ends. Either way the output folder peaks near twice the data set (spill + shards)
and holds it once after commit (``shardprep.capacity.RUN_SPACE_FACTOR``).
"""
from __future__ import annotations

import itertools
import mmap
import os
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from shardprep import fs, naming, native, writer
from shardprep.config import ReshardConfig
from shardprep.framing import FramedBatch
from shardprep.graph.elements import BatchCount, ShardPiece, SpilledBatch
from shardprep.malloc import freeze_startup_objects

__all__ = ["Placed", "count", "ends_dtype", "gather", "in_place", "joined", "pack", "place", "read_ends",
           "record_bounds", "reorder", "scatter_in_place", "segment", "sorted_url", "spill", "spill_url"]

def spill_url(config: ReshardConfig, kind: str, **fields: int) -> str:
    """The URL of this run's spill file of ``kind`` (``naming.SPILL_FILES``)."""
    return naming.join(config.output, naming.spill_path(config.run_id, kind, **fields))


def spill(url: str, *parts: bytes | bytearray) -> None:
    """Writes a batch's bytes (``parts``, back to back) between stages. Names are deterministic, so
    a retried bundle rewrites the same bytes; no fsync, since the shards, not the spill, are the
    durable output."""
    with fs.write_atomic(url, durable=False) as f:
        for data in parts:
            f.write(data)


def parsed_url(config: ReshardConfig, split: int, unit: tuple[int, int], part: int) -> str:
    """Where Parse spills batch (split, unit, part)."""
    return spill_url(config, "parsed", split=split, file=unit[0], unit=unit[1], part=part)


def listing_url(config: ReshardConfig, split: int) -> str:
    """The file that lists split ``split``'s batches for WriteShards in place (``write_listing``)."""
    return spill_url(config, "batches", split=split)


def write_listing(url: str, batches: np.ndarray) -> None:
    """Writes ``graph.counts.CountTable.batches`` (uint64 rows of file, unit, part, first position,
    records, bytes); deterministic, so a retried or repeated Assign rewrites the same bytes."""
    spill(url, np.ascontiguousarray(batches, "<u8").tobytes())


def read_listing(config: ReshardConfig, split: int, url: str, total: int) -> list[ShardPiece]:
    """The batches of ``write_listing``'s file as pieces in place, in the order of their records."""
    rows = np.frombuffer(fs.read_bytes(url), "<u8").reshape(-1, 6).tolist()
    return [ShardPiece(parsed_url(config, split, (file, unit), part), 0, size, first, n, total, True)
            for file, unit, part, first, n, size in rows]


def ends_dtype(size: int) -> str:
    """The width of the record ends (or lengths) of ``size`` bytes of records: 4 bytes a value below
    4 GiB, else 8."""
    return "<u4" if size < 1 << 32 else "<u8"


def pack(config: ReshardConfig, split: int, unit: tuple[int, int], part: int,
         blocks: list[FramedBatch]) -> SpilledBatch:
    """Spills a batch, given as the blocks it was read in (written back to back, not joined first),
    then its record ends, in one file; the element that crosses the runner is its url, size and count."""
    freeze_startup_objects()
    url = parsed_url(config, split, unit, part)
    sizes = [len(blob) for blob, _ in blocks]
    offsets = np.cumsum([0, *sizes[:-1]], dtype=np.uint64)  # each block's place in the file
    ends = np.concatenate([ends.astype("<u8") + offset for (_, ends), offset in zip(blocks, offsets)])
    spill(url, *(blob for blob, _ in blocks), ends.astype(ends_dtype(sum(sizes))).tobytes())
    return SpilledBatch(split, unit, part, url, sum(sizes), len(ends))


def read_ends(batch: SpilledBatch) -> np.ndarray:
    """All record ends of a spilled batch, as uint64: after its records, or the whole file once
    ``reorder`` has cut it down to them."""
    width = np.dtype(ends_dtype(batch.size)).itemsize * batch.num_records
    try:
        data = fs.read_bytes(batch.url, batch.size, batch.size + width)
    except (OSError, ValueError):  # a range past the end of a cut file (an object store may refuse it)
        data = b""
    if len(data) != width:
        data = fs.read_bytes(batch.url, 0, width)
    return np.frombuffer(data, ends_dtype(batch.size)).astype(np.uint64)


SPARSE = 512  # a piece taking under 1/SPARSE of its batch is read record by record, else through a map


def record_bounds(url: str, size: int, which: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of records ``which`` (ascending) of the local spill file ``url`` (``size``
    bytes of records, then their ends): mapped (only the pages holding them are read), or, for a
    few records of many (``SPARSE``), read as the two ends around each (``native.pread_records``)."""
    which = np.asarray(which, np.int64)
    dtype = np.dtype(ends_dtype(size))
    with fs.open_file(url) as f:
        if SPARSE * len(which) >= (os.fstat(f.fileno()).st_size - size) // dtype.itemsize:
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as view:
                ends = np.frombuffer(view, dtype, offset=size)
                stops, starts = ends[which].astype(np.int64), ends[which - 1].astype(np.int64)
                del ends  # the map closes only when no array looks into it
        else:  # the end before each record and its own (record 0: its own only)
            before = np.maximum(which - 1, 0)
            counts = which - before + 1
            ends = np.frombuffer(native.pread_records(f.fileno(), _int64(size + before * dtype.itemsize),
                                                      _int64(counts * dtype.itemsize)), dtype)
            last = np.cumsum(counts) - 1
            stops, starts = ends[last].astype(np.int64), ends[last - 1].astype(np.int64)
    if len(which) and which[0] == 0:
        starts[0] = 0  # record 0 starts at 0
    return starts, stops


def _int64(values: Any) -> np.ndarray:
    return np.ascontiguousarray(values, "<i8")


def sorted_url(config: ReshardConfig, batch: SpilledBatch) -> str:
    """Where Assign puts ``batch`` reordered by (shard, place in shard)."""
    return spill_url(config, "sorted", split=batch.split, file=batch.unit[0], unit=batch.unit[1], part=batch.part)


def reorder(batch: SpilledBatch, sorted_url: str, order: np.ndarray, bounds: Sequence[int]) -> list[tuple[int, int]]:
    """Writes the records of ``batch`` in ``order`` to ``sorted_url`` as segments (records
    ``order[bounds[i]:bounds[i + 1]]`` each: their lengths, then the records), then cuts the parsed
    file down to its ends (kept for a retry); returns each segment's byte range.

    Both names are deterministic and each file is replaced whole or not at all, so a retried bundle
    that finds the sorted file (the parsed one possibly cut already) keeps it: the bytes are the same.
    """
    freeze_startup_objects()
    ends = read_ends(batch)
    lengths = np.diff(ends, prepend=np.uint64(0))[order]
    heads, sizes, ranges, at = [], [], [], 0
    for lo, hi in zip(bounds, bounds[1:]):
        sizes.append(int(lengths[lo:hi].sum()))
        # 4-byte lengths where the whole segment stays below 4 GiB: ``segment`` reads the width off its size
        heads.append(lengths[lo:hi].astype(ends_dtype(sizes[-1] + 4 * (hi - lo))).tobytes())
        ranges.append((at, at + len(heads[-1]) + sizes[-1]))
        at = ranges[-1][1]
    if not fs.exists(sorted_url):
        data, pos, parts = memoryview(gather(fs.read_bytes(batch.url, 0, batch.size), ends, order)), 0, []
        for head, size in zip(heads, sizes):
            parts += [head, data[pos:pos + size]]
            pos += size
        spill(sorted_url, *parts)
    spill(batch.url, ends.astype(ends_dtype(batch.size)).tobytes())  # one copy of the records in spill
    return ranges


def segment(blob: bytes | bytearray, count: int) -> tuple[memoryview, np.ndarray]:
    """The records of a ``reorder`` segment (``count`` of them) and their ends within them."""
    dtype = ends_dtype(len(blob))
    width = np.dtype(dtype).itemsize
    lengths = np.frombuffer(blob, dtype, count=count)
    data = memoryview(blob)[width * count:]
    if int(lengths.sum()) != len(data):
        raise RuntimeError(f"a spill segment of {len(blob)} bytes does not hold {count} records: the spill is corrupt")
    return data, np.cumsum(lengths, dtype="<u8")


class Placed(NamedTuple):
    """One piece's records of a shard: record ``i`` is ``lengths[i]`` bytes at ``starts[i]`` of
    ``data`` (a segment read) or of the local spill file ``url`` (``data`` None: read in place), and
    goes to place ``places[i]`` of the shard."""

    places: np.ndarray  # int64
    starts: np.ndarray  # int64
    lengths: np.ndarray  # int64
    data: Any = None
    url: str = ""


def place(pieces: Sequence[Placed], count: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``count`` records of ``pieces`` in their places, back to back, in a page-aligned buffer
    (``writer.write_shard`` writes such a buffer past the page cache), copied once, a piece at a time
    (one spill file mapped at a time: ``scatter_in_place``); and where each record ends in it."""
    sizes = np.zeros(count, np.int64)
    for piece in pieces:
        sizes[piece.places] = piece.lengths
    ends = np.cumsum(sizes)
    out = writer.aligned_buffer(int(ends[-1]) if count else 0)
    starts = ends - sizes
    for piece in pieces:
        dests = _int64(starts[piece.places])
        if piece.data is None:
            scatter_in_place(piece.url, piece.starts, piece.lengths, dests, out)
        else:
            native.scatter(piece.data, _int64(piece.starts), _int64(piece.lengths), dests, out)
    return out, ends.astype(np.uint64)


def in_place(config: ReshardConfig, url: str) -> bool:
    """Whether WriteShards reads ``url``'s records in place (a local file it can map, of a spill that
    fits in memory: ``config.spill_in_place``), rather than from a reordered copy."""
    return config.spill_in_place and fs.is_local(url)


def scatter_in_place(url: str, starts: np.ndarray, lengths: np.ndarray, dests: np.ndarray, out: np.ndarray) -> None:
    """Copies the records ``[starts[i], starts[i] + lengths[i])`` of the local file ``url`` to
    ``out[dests[i]:]``, copying nothing but the records: through a map of the file (only the pages
    holding them are read; the map lasts only this copy), or, when they are under 1/``SPARSE`` of its
    bytes, with ``pread`` (``native.pread_records``; adjacent records in one call). A map of a batch
    file costs more than reading a few of its records, and less than one read each of many."""
    freeze_startup_objects()
    starts, lengths = _int64(starts), _int64(lengths)
    with fs.open_file(url) as f:  # a local file: Python's open (no fsspec file system lookup)
        if SPARSE * int(lengths.sum()) < os.fstat(f.fileno()).st_size:
            read = native.pread_records(f.fileno(), starts, lengths)
            native.scatter(read, _int64(np.cumsum(lengths) - lengths), lengths, dests, out)
            return
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as view:
            native.scatter(view, starts, lengths, dests, out)


def count(batch: SpilledBatch) -> BatchCount:
    """The side-input entry of a spilled batch."""
    return BatchCount(batch.split, batch.unit, batch.part, batch.num_records, batch.size)


def joined(framed: list[bytes]) -> FramedBatch:
    """Framed records joined into one batch (a few records, a small file's: their ends summed in one
    step, without numpy's fixed cost twice)."""
    if len(framed) <= 64:
        return FramedBatch(b"".join(framed), np.fromiter(itertools.accumulate(map(len, framed)), dtype="<u8",
                                                         count=len(framed)))
    return FramedBatch(b"".join(framed),
                       np.cumsum(np.fromiter(map(len, framed), dtype="<u8", count=len(framed)), dtype="<u8"))


def gather(blob: bytes, ends: np.ndarray, order: np.ndarray) -> bytes:
    """The records of a packed batch (record ``i`` ends at ``ends[i]``) in ``order``, in one copy."""
    return native.gather(blob, np.ascontiguousarray(ends, "<u8"), np.ascontiguousarray(order, "<i8"))
