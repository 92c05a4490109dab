"""The counts side input as arrays: one row per spilled batch, sorted, with each batch's first position.

Assign needs, for every batch, the global position of its first record within its split: the
prefix sum of the record counts of the batches before it in (split, file, unit, part) order. Held
as Python tuples and dicts this costs an object per value and a sort of tuples on every worker;
here it is six int64 columns (48 bytes a batch) built in one pass, sorted once with numpy on a
packed key, and looked up by binary search, so a worker's plan is O(batches) in time and memory
(``BENCHMARKS.md``, "Scale on paper").
"""
from __future__ import annotations

import itertools
from collections.abc import Iterable

import numpy as np

__all__ = ["CountTable"]

_COLUMNS = 6  # split, file, unit, part, num_records, size
_KEY_COLUMNS = 4


class CountTable:
    """The de-duplicated batch counts of a run, sorted by (split, file, unit, part), with prefix sums.

    ``counts``: ``graph.elements.BatchCount`` tuples (split, (file, unit), part, records, bytes).

    Runners sometimes deliver a side-input element twice: equal duplicates are dropped, different
    ones raise ``RuntimeError`` (the shuffle would be wrong).
    """

    def __init__(self, counts: Iterable[tuple]) -> None:
        flat = itertools.chain.from_iterable((c[0], c[1][0], c[1][1], c[2], c[3], c[4]) for c in counts)
        rows = np.fromiter(flat, dtype=np.int64).reshape(-1, _COLUMNS)
        if len(rows) and rows.min() < 0:
            raise RuntimeError("the counts side input holds a negative value: refusing to shuffle")
        maxima = rows[:, :_KEY_COLUMNS].max(axis=0) if len(rows) else np.zeros(_KEY_COLUMNS, np.int64)
        self._bits = [max(1, int(m).bit_length()) for m in maxima.tolist()]
        if sum(self._bits) > 64:
            raise RuntimeError(f"batch keys need {sum(self._bits)} bits (maxima {maxima.tolist()}): more than 64")
        keys = self._pack(*(rows[:, i].astype(np.uint64) for i in range(_KEY_COLUMNS)))
        order = np.argsort(keys, kind="stable")
        keys, rows = keys[order], rows[order]
        same = keys[1:] == keys[:-1]
        if same.any():
            clash = np.flatnonzero(same & np.any(rows[1:, 4:] != rows[:-1, 4:], axis=1))
            if len(clash):
                key = rows[clash[0], :_KEY_COLUMNS].tolist()
                raise RuntimeError(f"side input holds two different counts for batch {key}: refusing to shuffle")
            keep = np.concatenate(([True], ~same))
            keys, rows = keys[keep], rows[keep]
        self._keys = keys
        self.split = rows[:, 0]
        self.num_records = rows[:, 4]
        self.size = rows[:, 5]
        ends = np.cumsum(self.num_records)
        self._first = ends - self.num_records  # run-wide exclusive prefix sum; a split's start is subtracted
        del rows

    def _pack(self, split: np.ndarray, file: np.ndarray, unit: np.ndarray, part: np.ndarray) -> np.ndarray:
        """One uint64 per batch whose order is the order of (split, file, unit, part)."""
        b = [np.uint64(x) for x in self._bits]
        return (((split << b[1] | file) << b[2] | unit) << b[3]) | part

    def __len__(self) -> int:
        return len(self._keys)

    def splits(self) -> list[int]:
        """The splits that have batches, in order."""
        s = self.split  # sorted: a batch's key starts with its split
        return s[np.concatenate(([True], s[1:] != s[:-1]))].tolist() if len(s) else []

    def bounds(self, split: int) -> tuple[int, int]:
        """Rows ``[lo, hi)`` of ``split``'s batches."""
        lo, hi = np.searchsorted(self.split, [split, split + 1])
        return int(lo), int(hi)

    def totals(self, split: int) -> tuple[int, int]:
        """(records, bytes) of ``split``."""
        lo, hi = self.bounds(split)
        return int(self.num_records[lo:hi].sum()), int(self.size[lo:hi].sum())

    def ordinal(self, split: int, unit: tuple[int, int], part: int) -> int:
        """Batch (split, unit, part)'s place among its split's batches, in the order of their records."""
        fields = (split, unit[0], unit[1], part)
        if any(v < 0 or v.bit_length() > b for v, b in zip(fields, self._bits)):
            raise KeyError(f"batch {fields} is not in the counts side input")
        key = self._pack(*(np.uint64(v) for v in fields))
        row = int(np.searchsorted(self._keys, key))
        if row >= len(self._keys) or self._keys[row] != key:
            raise KeyError(f"batch {fields} is not in the counts side input")
        return row - self.bounds(split)[0]

    def first_position(self, split: int, unit: tuple[int, int], part: int) -> int:
        """The position within its split of the first record of batch (split, unit, part)."""
        lo, _ = self.bounds(split)
        return int(self._first[lo + self.ordinal(split, unit, part)] - self._first[lo])

    def batches(self, split: int) -> np.ndarray:
        """``split``'s batches in the order of their records: rows of (file, unit, part, first
        position in the split, records, bytes), uint64."""
        lo, hi = self.bounds(split)
        keys, b = self._keys[lo:hi], [np.uint64(x) for x in self._bits]
        one = np.uint64(1)
        part = keys & ((one << b[3]) - one)
        unit = (keys >> b[3]) & ((one << b[2]) - one)
        file = (keys >> (b[3] + b[2])) & ((one << b[1]) - one)
        first = (self._first[lo:hi] - self._first[lo]).astype(np.uint64)
        return np.stack([file, unit, part, first, self.num_records[lo:hi].astype(np.uint64),
                         self.size[lo:hi].astype(np.uint64)], axis=1)

    @property
    def nbytes(self) -> int:
        """Memory held by the table's arrays."""
        return sum(a.nbytes for a in (self._keys, self.split, self.num_records, self.size, self._first))
