"""Mergeable sketches of strings for ``shardprep.stats.feature_stats``: like ``shardprep.stats.sketches``, each one's
state is a function of the multiset (or the set) of values it has seen, never of the order or
grouping of the batches.

``StringCounts``: exact counts per distinct byte string, as a pyarrow array of the values and an
int64 array of their counts (counted by ``dictionary_encode`` + ``bincount``: no Python object per value).

``HyperLogLog``: distinct values estimated with ``2**HLL_P`` one-byte registers (precision 14:
16 KiB, a standard error of ``1.04 / sqrt(2**14)`` ~ 0.8%), hash = ``native.hash_values`` (the
length, then each 8-byte word, through MurmurHash3's 64-bit finalizer; compiled, or its Python twin:
the same bits; stable across processes, unlike ``hash()``); merging is the elementwise maximum.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np
import pyarrow as pa

from shardprep import native

__all__ = ["HLL_P", "LONG_VALUE", "MAX_PARTS", "HyperLogLog", "StringCounts", "binary_hashes", "column_hashes", "distinct_of",
           "load_counting", "value_offsets"]

HLL_P = 14  # HyperLogLog precision: 2**14 registers
MAX_PARTS = 64  # a StringCounts counts its parts together beyond this many
LONG_VALUE = 64  # bytes: values this long on average, never counted, are pickled uncounted (a text's)


class StringCounts:
    """Exact counts per distinct byte string: ``values`` (a pyarrow large_binary array, each value
    once, in no particular order) and ``counts`` (int64). Treated as immutable, like ``Counts``;
    what it holds (the value -> count mapping) depends only on the values counted.

    A merge only lists both sides' parts; they are counted together (one ``dictionary_encode``) when
    asked for the values, their number or their bytes. ``size_bound`` (the parts' sizes summed) is
    an upper bound of the distinct values that needs no counting: a feature far under the cap is
    merged at no cost per value, one at it counted once per doubling, not at every merge. A part
    may be a batch's values not yet counted (``pending``: each value once, repeats included), so a
    batch is hashed once, when the parts are counted together, not once alone and again then (an
    id column: every value distinct, counted once up to the cap instead of twice). Pickled (a
    worker's partial on its way to the merge) it is counted first, unless its parts were never
    counted and hold values of ``LONG_VALUE`` bytes or more on average: those travel uncounted."""

    __slots__ = ("_parts",)

    def __init__(self, values: pa.Array | None = None, counts: np.ndarray | None = None) -> None:
        self._parts = [(values, counts)] if values is not None and len(values) else []

    @classmethod
    def of(cls, values: pa.Array, weights: np.ndarray | None = None) -> StringCounts:
        """The counts of a binary array's values (each once, or ``weights`` times): one hash pass
        (``dictionary_encode``, faster than ``value_counts`` or ``group_by``) and a bincount."""
        import pyarrow.compute as pc  # here: its import is slow, and only counting strings needs it

        encoded = pc.dictionary_encode(_large(values))
        counts = np.bincount(encoded.indices.to_numpy(zero_copy_only=False), weights=weights,
                             minlength=len(encoded.dictionary))  # float64 weights: exact below 2**53
        return cls(encoded.dictionary, counts.astype(np.int64))

    @classmethod
    def pending(cls, values: pa.Array | Sequence[pa.Array]) -> StringCounts:
        """The counts of a binary array's values (or of several arrays' values together: a batch
        held in the pieces it came in, not joined), counted only when asked for (``_whole``)."""
        counts = cls()
        counts._parts = [(part, None) for part in ([values] if isinstance(values, pa.Array) else values) if len(part)]
        return counts

    def merge(self, other: StringCounts) -> StringCounts:
        if not other._parts or not self._parts:  # a number feature's empty counts: no cost per feature
            return other if not self._parts else self
        merged = StringCounts()
        merged._parts = self._parts + other._parts
        if len(merged._parts) > MAX_PARTS:
            merged._whole()
        return merged

    def _whole(self) -> tuple[pa.Array, np.ndarray]:
        if not self._parts:
            return pa.array([], pa.large_binary()), np.zeros(0, np.int64)
        if len(self._parts) > 1 or self._parts[0][1] is None:
            values = [_large(v) for v, _ in self._parts]
            weights = None if all(c is None for _, c in self._parts) else np.concatenate(
                [np.ones(len(v), np.int64) if c is None else c for v, c in self._parts])
            whole = StringCounts.of(pa.concat_arrays(values) if len(values) > 1 else values[0], weights)
            self._parts = whole._parts  # the same mapping, counted once
        return self._parts[0]

    @property
    def values(self) -> pa.Array:
        return self._whole()[0]

    @property
    def counts(self) -> np.ndarray:
        return self._whole()[1]

    @property
    def size_bound(self) -> int:
        """At least the number of distinct values (exact once counted together)."""
        return sum(len(v) for v, _ in self._parts)

    @property
    def held_bytes(self) -> int:
        """The bytes of the values held (each distinct value once)."""
        values = self.values
        return int(np.diff(value_offsets(values)).sum()) if len(values) else 0

    @property
    def never_counted(self) -> bool:
        """Only batches not counted yet (``pending``): ``stats.cap`` judges them by their hashes."""
        return all(counts is None for _, counts in self._parts)

    def count(self) -> None:
        """Counts its parts together now (nothing to do once counted)."""
        self._whole()

    def distinct_hashes(self) -> tuple[np.ndarray, int]:
        """The distinct values' hashes (sorted) and their bytes, from the parts as they are: one
        compiled hash pass and a sort of 8-byte words, no counting (``stats.cap``'s test, whose
        answer, past the cap, is these hashes for the HyperLogLog)."""
        if not self._parts:
            return np.zeros(0, np.uint64), 0
        values = [_large(v) for v, _ in self._parts]
        return distinct_of(np.concatenate([binary_hashes(v) for v in values]),
                           np.concatenate([np.diff(value_offsets(v)) for v in values]))

    def hashes(self) -> np.ndarray:
        """``binary_hashes`` of the values (the HyperLogLog's input; repeats across parts change nothing)."""
        return np.concatenate([binary_hashes(v) for v, _ in self._parts]) if self._parts else np.zeros(0, np.uint64)

    def top(self, k: int) -> list[tuple[bytes, int]]:
        """The ``k`` most frequent values and their counts, by count (descending) then by value
        (ascending bytes): the same order everywhere, ties included."""
        if not len(self) or k <= 0:
            return []
        import pyarrow.compute as pc

        table = pa.table({"v": self.values, "c": pa.array(self.counts)})
        order = pc.sort_indices(table, sort_keys=[("c", "descending"), ("v", "ascending")])[:k]
        picked = table.take(order)
        return list(zip(picked.column("v").to_pylist(), picked.column("c").to_numpy().tolist()))

    def items(self) -> list[tuple[bytes, int]]:
        """Every (value, count), by value (tests, small features)."""
        values, counts = self._whole()
        return sorted(zip(values.to_pylist(), counts.tolist()))

    def __len__(self) -> int:
        return len(self._whole()[0])

    def __getstate__(self) -> tuple:
        if self._parts and self.never_counted and _part_bytes(self._parts) >= LONG_VALUE * self.size_bound:
            # long values never counted travel as they are (each part over its own bytes only): the
            # merge's union is as a rule past the cap, and then they are hashed there, never counted
            return None, tuple((_compact(values), None) for values, _ in self._parts)
        return self._whole()

    def __setstate__(self, state: tuple) -> None:
        if state[0] is None:
            self._parts = list(state[1])
        else:
            self._parts = [state] if len(state[0]) else []


def load_counting() -> None:
    """Imports what counting strings needs (``pyarrow.compute``: ``StringCounts.of`` and ``top``
    import it where they first run, as its import is slow). Called before a local pool forks, its
    processes share the import instead of each making its own."""
    import pyarrow.compute  # noqa: F401


def distinct_of(hashes: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, int]:
    """The distinct values' hashes (sorted) and their bytes, of values given by their hashes
    (``column_hashes``) and sizes: each repeated value's bytes counted once."""
    ordered = np.sort(hashes)  # faster than np.unique's index (or its hash table, for 8-byte words)
    new = np.concatenate(([True], ordered[1:] != ordered[:-1]))
    if new.all():  # every value distinct (long texts, ids): each counts
        return ordered, int(sizes.sum())
    # each repeated value's bytes counted once, at its first place (as np.unique's index): found
    # among the values whose hash repeats only (as a rule a few)
    repeats = ordered[1:][~new[1:] & new[:-1]]  # sorted, each once
    member = np.flatnonzero(repeats[np.minimum(np.searchsorted(repeats, hashes), repeats.size - 1)] == hashes)
    _, first = np.unique(hashes[member], return_index=True)
    held = sizes.sum() - sizes[member].sum() + sizes[member[first]].sum()
    return ordered[new], int(held)


def column_hashes(data: bytes | memoryview, offsets: np.ndarray) -> np.ndarray:
    """The sketch's 64-bit hashes of values ``data[offsets[i]:offsets[i + 1]]`` (one compiled pass)."""
    return np.frombuffer(native.hash_values(data, np.ascontiguousarray(offsets, np.int64), 0), np.uint64)


def binary_hashes(values: pa.Array) -> np.ndarray:
    """``column_hashes`` of a pyarrow binary array's values (in place: no copy of the bytes)."""
    values = _large(values)
    data = values.buffers()[2]
    return column_hashes(data if data is not None else b"", value_offsets(values))


def _part_bytes(parts: Sequence[tuple[pa.Array, np.ndarray | None]]) -> int:
    total = 0
    for values, _ in parts:
        offsets = value_offsets(values)
        total += int(offsets[-1] - offsets[0])
    return total


def _compact(values: pa.Array) -> pa.Array:
    """A binary array's values as a large_binary array over their own bytes only (no copy of them)."""
    values = _large(values)
    offsets = value_offsets(values)
    data = values.buffers()[2]
    lo, hi = int(offsets[0]), int(offsets[-1])
    return pa.Array.from_buffers(pa.large_binary(), len(values), [None, pa.py_buffer(offsets - lo),
                                                                  data.slice(lo, hi - lo) if data is not None else None])


def _large(values: pa.Array) -> pa.Array:
    return values.cast(pa.large_binary()) if values.type != pa.large_binary() else values


def value_offsets(values: pa.Array) -> np.ndarray:
    """A binary or string array's value offsets (int32 or int64 as its type, ``len + 1`` of them, in its buffer)."""
    wide = values.type == pa.large_binary() or values.type == pa.large_string()
    return np.frombuffer(values.buffers()[1], np.int64 if wide else np.int32)[values.offset:values.offset + len(values) + 1]


def _hashes(values: Iterable[bytes]) -> np.ndarray:
    values = list(values)
    offsets = np.zeros(len(values) + 1, np.int64)
    np.cumsum(np.fromiter(map(len, values), np.int64, len(values)), out=offsets[1:])
    return column_hashes(b"".join(values), offsets)


class HyperLogLog:
    """Distinct values to ~0.8% (precision 14): ``registers`` is a uint8 array of ``2**HLL_P``."""

    __slots__ = ("registers",)

    def __init__(self, registers: np.ndarray | None = None) -> None:
        self.registers = np.zeros(1 << HLL_P, np.uint8) if registers is None else registers

    @classmethod
    def of(cls, values: Iterable[bytes]) -> HyperLogLog:
        """The sketch of distinct values (hashes each distinct value once: pass a set)."""
        return cls.of_hashes(_hashes(values))

    @classmethod
    def of_hashes(cls, h: np.ndarray) -> HyperLogLog:
        """The sketch of values given by their ``column_hashes`` (repeats change nothing)."""
        registers = np.zeros(1 << HLL_P, np.uint8)
        if h.size:
            index = (h >> np.uint64(64 - HLL_P)).astype(np.intp)
            rest = (h & np.uint64((1 << (64 - HLL_P)) - 1)).astype(np.float64)  # < 2**50: exact in float64
            _, exponent = np.frexp(rest)  # rest = m * 2**e, 0.5 <= m < 1: leading zeros = 50 - e (0 -> e = 0)
            rank = (64 - HLL_P + 1 - exponent).astype(np.uint8)
            np.maximum.at(registers, index, rank)
        return cls(registers)

    def merge(self, other: HyperLogLog) -> HyperLogLog:
        return HyperLogLog(np.maximum(self.registers, other.registers))

    def estimate(self) -> int:
        m = float(1 << HLL_P)
        alpha = 0.7213 / (1 + 1.079 / m)
        raw = alpha * m * m / float(np.ldexp(1.0, -self.registers.astype(np.int64)).sum())
        empty = int(np.count_nonzero(self.registers == 0))
        if raw <= 2.5 * m and empty:
            return round(m * math.log(m / empty))  # linear counting for small cardinalities
        return round(raw)

    def __getstate__(self) -> tuple:
        return (self.registers,)

    def __setstate__(self, state: tuple) -> None:
        (self.registers,) = state
