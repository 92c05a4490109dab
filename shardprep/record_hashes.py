"""Record hashes of ``--dedup exact``: each record's 128-bit hash, and a generation's sorted file of them.

A record's hash is two 64-bit hashes (``native.hash_values``, two fixed seeds) of its framed bytes
(the framing is a function of the Example bytes, so equal hashes mean equal Examples but for a
2**-128 chance), or, with ``--dedup-key``, of the key feature's values decoded from the Example, so
the same value read from CSV, JSON Lines, Parquet or TFRecord hashes the same. A record without
the key is never a duplicate. Hashes are rows of two uint64, ``(n, 2)``.

Each generation of a data set made with ``--dedup exact`` keeps its records' hashes, sorted and
without repeats, in ``<run>/dedup/hashes.bin`` (``naming.hashes_path``), named with its size and
crc32c by the manifest's generation entry (``manifest.HashesInfo``): a later append checks its
records against them (``contains``) without reading a shard.
"""
from __future__ import annotations

import numpy as np

from shardprep import fs, members, naming, native, record_index
from shardprep.errors import ManifestError
from shardprep.example.decoder import decode_example
from shardprep.manifest_generations import HashesInfo

__all__ = ["MAGIC", "contains", "of_framed", "of_keys", "read", "sorted_unique", "write"]

SEEDS = (0x5EED_D0D0_0001, 0x5EED_D0D0_0002)  # fixed: hashes compare across runs and data sets
MAGIC = b"SPHASH1\n"


def of_framed(blob: bytes | bytearray | memoryview | np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The hashes of a framed batch's records (record ``i`` ends at ``ends[i]``)."""
    offsets = np.concatenate(([0], np.asarray(ends, np.int64))).astype("<i8")
    out = np.empty((len(ends), 2), np.uint64)
    for i, seed in enumerate(SEEDS):
        out[:, i] = np.frombuffer(native.hash_values(blob, offsets, seed), "<u8")
    return out


def of_keys(blob: bytes | bytearray | memoryview | np.ndarray, ends: np.ndarray, key: str) -> tuple[np.ndarray, np.ndarray]:
    """The hashes of each framed record's ``key`` values (its repr, a function of the values alone),
    and whether the record holds the key (one without it is never a duplicate)."""
    view = memoryview(blob).cast("B")
    stops = np.asarray(ends, np.int64)
    starts = np.concatenate(([0], stops[:-1]))
    values, present = [], np.zeros(len(stops), bool)
    for i, (lo, hi) in enumerate(zip(starts.tolist(), stops.tolist())):
        example = bytes(view[lo + 12:hi - 4])  # the Example, unframed
        decoded = native.decode_example(example)
        found = (decoded if decoded is not None else decode_example(example)).get(key)
        present[i] = bool(found)
        values.append(repr(found).encode() if found else b"")
    data = b"".join(values)
    offsets = np.cumsum([0, *map(len, values)]).astype("<i8")
    out = np.empty((len(values), 2), np.uint64)
    for i, seed in enumerate(SEEDS):
        out[:, i] = np.frombuffer(native.hash_values(data, offsets, seed), "<u8")
    return out, present


def sorted_unique(rows: np.ndarray) -> np.ndarray:
    """Hash rows sorted by (first, second) word, repeats dropped."""
    rows = np.asarray(rows, np.uint64).reshape(-1, 2)
    # one sort of the first words (their rare ties after); np.take: a row gather several times faster than rows[order]
    rows = np.take(rows, np.argsort(np.ascontiguousarray(rows[:, 0])), axis=0)
    new_first = rows[1:, 0] != rows[:-1, 0]
    tied = np.flatnonzero(~new_first)
    if len(tied):
        lows = np.unique(np.searchsorted(rows[:, 0], rows[tied, 0], "left"))
        highs = np.searchsorted(rows[:, 0], rows[lows, 0], "right")
        for lo, hi in zip(lows.tolist(), highs.tolist()):
            rows[lo:hi] = rows[lo:hi][np.argsort(rows[lo:hi, 1])]
    keep = np.ones(len(rows), bool)
    keep[1:] = new_first | (rows[1:, 1] != rows[:-1, 1])
    return rows if keep.all() else np.ascontiguousarray(rows[keep])


def contains(table: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """For each of ``rows``, whether ``table`` (``sorted_unique``) holds it."""
    rows = np.asarray(rows, np.uint64).reshape(-1, 2)
    found = np.zeros(len(rows), bool)
    if not len(table) or not len(rows):
        return found
    first = np.ascontiguousarray(table[:, 0])
    order = np.argsort(np.ascontiguousarray(rows[:, 0]))  # searches in order walk the table once, in cache
    rows = np.take(rows, order, axis=0)
    lo = np.searchsorted(first, rows[:, 0], "left")
    hi = np.searchsorted(first, rows[:, 0], "right")
    one = np.flatnonzero(hi - lo == 1)  # the first word once in the table: compare the second
    found[order[one]] = table[lo[one], 1] == rows[one, 1]
    for i in np.flatnonzero(hi - lo > 1).tolist():  # a first word shared by two hashes of the table: rare
        found[order[i]] = bool(np.any(table[lo[i]:hi[i], 1] == rows[i, 1]))
    return found


def write(root: str, run_id: str, rows: np.ndarray, key: str) -> HashesInfo:
    """Stores a generation's hashes (``sorted_unique`` rows) in its run folder; returns its entry."""
    rows = np.ascontiguousarray(rows, "<u8")
    data = MAGIC + np.uint64(len(rows)).astype("<u8").tobytes() + rows.tobytes()
    path = naming.hashes_path(run_id)
    with fs.write_atomic(naming.join(root, path)) as f:
        f.write(data)
    return HashesInfo(path, len(rows), len(data), record_index.crc32c_hex(data), key)


def read(root: str, info: HashesInfo, *, field: str) -> np.ndarray:
    """A generation's hashes the manifest names (``field``: where), checked against its size and crc32c."""
    data = members.read_member(root, info.path, field=field, size=info.num_bytes)
    if (len(data) != info.num_bytes or record_index.crc32c_hex(data) != info.crc32c or not data.startswith(MAGIC)
            or len(data) != len(MAGIC) + 8 + 16 * info.num_records):
        raise ManifestError(f"{naming.join(root, info.path)} ({field}) is not the file the manifest names: its size "
                            f"or crc32c differs; run python -m shardprep.verify {root}")
    return np.frombuffer(data, "<u8", offset=len(MAGIC) + 8).reshape(-1, 2).astype(np.uint64)
