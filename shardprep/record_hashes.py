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

__all__ = ["MAGIC", "contains", "of_framed", "of_keys", "order", "order_ties", "read", "sorted_unique", "unique_sorted", "write"]

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


def order(rows: np.ndarray) -> np.ndarray:
    """The permutation (int64) that sorts hash rows by (first, second) word, exactly (``order_ties``)."""
    return order_ties(rows)[0]


def order_ties(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The permutation (int64) that sorts hash rows by (first, second) word, exactly; and the places
    in that order of the rows whose first words share their high bits with a neighbour's (where
    every repeat is, ascending).

    One value sort instead of an argsort: each first word with its low ``b`` bits replaced by the
    row's index (``2**b`` >= the row count) sorts in the order of the words' high bits, and the
    index comes back from the low bits. Rows whose first words share their high bits (about
    ``n**2 / 2**(65 - b)`` pairs of random hashes, and every repeat) are then ordered by whole
    (first, second) words among themselves, in one lexsort of those rows."""
    rows = np.asarray(rows, np.uint64).reshape(-1, 2)
    n = len(rows)
    if n < 2:
        return np.arange(n, dtype=np.int64), np.zeros(0, np.int64)
    low = np.uint64((1 << (n - 1).bit_length()) - 1)
    keys = rows[:, 0] & ~low
    keys |= np.arange(n, dtype=np.uint64)
    keys.sort()
    out = (keys & low).astype(np.int64)
    keys &= ~low
    tied = keys[1:] == keys[:-1]
    if not tied.any():
        return out, np.zeros(0, np.int64)
    at = np.zeros(n, bool)  # high bits shared: those rows by (first, second); groups keep their place
    at[1:] |= tied
    at[:-1] |= tied
    at = np.flatnonzero(at)
    mine = out[at]
    out[at] = mine[np.lexsort((rows[mine, 1], rows[mine, 0]))]
    return out, at


def sorted_unique(rows: np.ndarray) -> np.ndarray:
    """Hash rows sorted by (first, second) word, repeats dropped."""
    rows = np.asarray(rows, np.uint64).reshape(-1, 2)
    rows = np.take(rows, order(rows), axis=0)  # np.take: a row gather several times faster than rows[order]
    return unique_sorted(rows)


def unique_sorted(rows: np.ndarray) -> np.ndarray:
    """Sorted hash rows (``order``) without their repeats."""
    if len(rows) < 2:
        return np.ascontiguousarray(rows)
    keep = np.ones(len(rows), bool)
    keep[1:] = (rows[1:, 0] != rows[:-1, 0]) | (rows[1:, 1] != rows[:-1, 1])
    return np.ascontiguousarray(rows) if keep.all() else np.ascontiguousarray(rows[keep])


def contains(table: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """For each of ``rows``, whether ``table`` (``sorted_unique``) holds it."""
    rows = np.asarray(rows, np.uint64).reshape(-1, 2)
    found = np.zeros(len(rows), bool)
    if not len(table) or not len(rows):
        return found
    first = np.ascontiguousarray(table[:, 0])
    ranks = order(rows)  # searches in order walk the table once, in cache
    rows = np.take(rows, ranks, axis=0)
    lo = np.searchsorted(first, rows[:, 0], "left")
    hi = np.searchsorted(first, rows[:, 0], "right")
    one = np.flatnonzero(hi - lo == 1)  # the first word once in the table: compare the second
    found[ranks[one]] = table[lo[one], 1] == rows[one, 1]
    for i in np.flatnonzero(hi - lo > 1).tolist():  # a first word shared by two hashes of the table: rare
        found[ranks[i]] = bool(np.any(table[lo[i]:hi[i], 1] == rows[i, 1]))
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
