"""Cutting a large line-based file (CSV, JSON Lines) into work units that each start at a record.

The launcher reads no data to cut: a large file becomes *nominal* units, byte ranges
``[k * unit_bytes, min((k + 1) * unit_bytes, size))`` straight from its size (``line_units``). Inside
the pipeline each nominal range's ``"`` (CSV) and ``\\n`` counts are taken in parallel
(``count_range``, the ``CountRanges`` step of ``graph.ranges``); their prefix sums (``CutTable``, a
small side input) give the quote parity and the line number at every range start, and ``resolve``
turns a nominal unit into an exact one before it is read: its start is just after the first newline
at or after ``k * unit_bytes`` that is outside quotes (JSON Lines: any newline), its end the next
unit's start, its first line number exact. A unit owns the records whose first byte lies in
``[start, end)``; a unit whose range holds no record start (a record longer than ``unit_bytes``)
comes out empty (``start == end``). An empty file, a gzip file or a file of at most ``unit_bytes``
is one exact unit and needs no counts.

Quotes (CSV): RFC 4180 writes a quote inside a quoted field as two quotes, so the parity of the
number of ``"`` characters before a byte says whether it is inside a quoted field. A stray quote in
an unquoted field (``5" screen``) flips the parity for the rest of the file: if the file's total
count of quotes is odd, unit 0 reads the whole file and the file's other units read nothing; if two
stray quotes bracket quoted fields that hold newlines, a cut can land inside a record, which the CSV
reader of the unit before it detects (its last record runs past the cut) and reports as a fatal
``InputError``, never as wrong rows. These are the rules the launcher applied when it scanned the
whole file itself; the cuts land on the same bytes (``tests/cuts_reference.py``).
"""
from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable
from typing import NamedTuple

import numpy as np

from shardprep import fs, native
from shardprep.formats.base import InputFile, WorkUnit

__all__ = ["LINE_FORMATS", "NEWLINES", "QUOTES", "CutTable", "RangeCount", "count_range", "line_units", "resolve",
           "resolve_alone"]

QUOTES, NEWLINES = "quotes", "newlines"  # ``WorkUnit.nominal``: how its cut is found (CSV, JSON Lines)
LINE_FORMATS = ("csv", "jsonl")  # cut by ``line_units``: a unit owns the records that start in [start, end)
COUNT_BLOCK = 8 << 20  # bytes per read while counting a range
FIRST_PROBE = 64 << 10  # the first read looking for a boundary; each next one doubles, up to COUNT_BLOCK


def line_units(file: InputFile, unit_bytes: int, *, columns: tuple[str, ...] = (), quotes: bool) -> list[WorkUnit]:
    """The units of a line-based file, from its size alone: one exact unit, or nominal byte ranges."""
    if file.gzip or file.size <= unit_bytes:
        return [WorkUnit(file, 0, 0, file.size, 1, columns)]
    rule = QUOTES if quotes else NEWLINES
    return [WorkUnit(file, k, start, min(start + unit_bytes, file.size), 1 if k == 0 else 0, columns, nominal=rule)
            for k, start in enumerate(range(0, file.size, unit_bytes))]


class RangeCount(NamedTuple):
    """CountRanges -> Parse (side input): the ``"`` and ``\\n`` bytes in one nominal unit's range."""

    file: int
    index: int
    quotes: int
    newlines: int


def count_range(unit: WorkUnit) -> RangeCount:
    """The counts of a nominal unit's byte range: blocks read into one buffer (no fresh memory per
    block) and counted in one compiled pass (``native.line_counts``)."""
    quotes = newlines = 0
    buffer = bytearray(min(COUNT_BLOCK, max(unit.end - unit.start, 1)))
    view = memoryview(buffer)
    with fs.open_file(unit.file.url, "rb") as f:
        f.seek(unit.start)
        left = unit.end - unit.start
        while left > 0 and (n := f.readinto(view[:min(len(buffer), left)])):
            left -= n
            q, nl = native.line_counts(buffer, n, unit.nominal == QUOTES)
            quotes, newlines = quotes + q, newlines + nl
    if left:
        raise OSError(f"{unit.file.url!r} ends before byte {unit.end}: it changed after planning")
    return RangeCount(unit.file.index, unit.index, quotes, newlines)


class CutTable:
    """Per file and nominal unit: the quote parity and newlines before the unit's nominal start.

    Built from every ``RangeCount`` of a run: numpy prefix sums over the units sorted by (file,
    index), O(units) time and 24 bytes a unit. Runners sometimes deliver
    a side-input element twice: equal duplicates are dropped, different ones or a missing range
    raise ``RuntimeError``.
    """

    def __init__(self, counts: Iterable[tuple[int, int, int, int]]) -> None:
        rows = np.fromiter(itertools.chain.from_iterable(counts), dtype=np.int64).reshape(-1, 4)
        self._keys, self._before, self._odd = np.zeros(0, np.int64), np.zeros((0, 2), np.int64), {}
        if not len(rows):
            return
        rows = rows[np.lexsort((rows[:, 1], rows[:, 0]))]  # by (file, index)
        again = (rows[1:, :2] == rows[:-1, :2]).all(axis=1)
        if (again & (rows[1:, 2:] != rows[:-1, 2:]).any(axis=1)).any():
            raise RuntimeError("the range counts side input holds two different counts for one unit")
        rows = rows[np.concatenate(([True], ~again))]
        keys = rows[:, 0] << 32 | rows[:, 1]
        first = np.ones(len(rows), bool)
        first[1:] = rows[1:, 0] != rows[:-1, 0]
        group = np.maximum.accumulate(np.where(first, np.arange(len(rows)), 0))  # row of each file's unit 0
        if (rows[:, 1] != np.arange(len(rows)) - group).any():
            raise RuntimeError("the range counts side input lacks a unit: its prefix sums would be wrong")
        before = np.cumsum(rows[:, 2:], axis=0) - rows[:, 2:]
        before -= before[group]  # the counts before each unit, from its file's start
        self._keys, self._before = keys, before
        last = np.append(np.flatnonzero(first[1:]), len(rows) - 1)  # each file's last row
        self._odd = dict(zip(rows[last, 0].tolist(), ((before[last, 0] + rows[last, 2]) & 1).astype(bool).tolist()))

    def at(self, file: int, index: int) -> tuple[int, int]:
        """(quote parity, newlines) in file ``file`` before nominal unit ``index``'s start."""
        i = int(np.searchsorted(self._keys, file << 32 | index))
        if i == len(self._keys) or self._keys[i] != file << 32 | index:
            raise RuntimeError(f"the range counts side input lacks unit {index} of file {file}")
        quotes, newlines = self._before[i].tolist()
        return quotes & 1, newlines

    def odd_quotes(self, file: int) -> bool:
        """Whether the file's total count of quotes is odd (its parity is unreliable: one unit reads it all)."""
        return self._odd[file]


def resolve(unit: WorkUnit, table: CutTable) -> WorkUnit:
    """The exact unit of a nominal one (``unit`` itself if it is exact); ``start == end``: no records."""
    if not unit.nominal:
        return unit
    file, quotes = unit.file, unit.nominal == QUOTES
    last = unit.end >= file.size
    table.at(file.index, -(-file.size // _unit_bytes(unit)) - 1)  # every range of the file counted, or RuntimeError
    if quotes and table.odd_quotes(file.index):
        start = 0 if unit.index == 0 else file.size
        return dataclasses.replace(unit, start=start, end=file.size, first_position=1, nominal="")
    if unit.index == 0:
        start, line = 0, 1
    else:
        parity, newlines = table.at(file.index, unit.index)
        start, counted = _boundary(file, unit.start, parity, quotes)
        line = 1 + newlines + counted
    if last:
        end = file.size
    else:
        parity, _ = table.at(file.index, unit.index + 1)
        end = _boundary(file, unit.end, parity, quotes)[0]
    return dataclasses.replace(unit, start=start, end=max(start, end), first_position=line, nominal="")


_last_alone: list = [None, None]  # (file, unit_bytes) and its CutTable, for ``resolve_alone``


def resolve_alone(unit: WorkUnit) -> WorkUnit:
    """``resolve`` outside a pipeline (library callers, tests): counts every range of the unit's file here."""
    if not unit.nominal:
        return unit
    size = _unit_bytes(unit)
    key = (unit.file, size)
    if _last_alone[0] != key or not unit.file.version:  # one table for a file's units read one after another
        ranges = (dataclasses.replace(unit, index=k, start=s, end=min(s + size, unit.file.size))
                  for k, s in enumerate(range(0, unit.file.size, size)))
        _last_alone[:] = [key, CutTable(count_range(r) for r in ranges)]
    return resolve(unit, _last_alone[1])


def _unit_bytes(unit: WorkUnit) -> int:
    """The ``unit_bytes`` a nominal unit was planned with (unit 0 of a cut file is never its last)."""
    return unit.start // unit.index if unit.index else unit.end - unit.start


def _boundary(file: InputFile, offset: int, parity: int, quotes: bool) -> tuple[int, int]:
    """(just after the first newline at or after ``offset`` outside quotes, newlines in between), or
    (size, ...) when there is none; ``parity``: the quote parity at ``offset``."""
    pos, newlines, probe = offset, 0, FIRST_PROBE
    while pos < file.size:
        block = fs.read_bytes(file.url, pos, min(pos + probe, file.size))
        if not block:
            break
        newline = _newline_outside_quotes(block, 0, parity) if quotes else block.find(b"\n")
        if newline >= 0:
            return pos + newline + 1, newlines + block.count(b"\n", 0, newline + 1)
        newlines += block.count(b"\n")
        if quotes:
            parity ^= block.count(b'"') & 1
        pos += len(block)
        probe = min(2 * probe, COUNT_BLOCK)
    return file.size, newlines


def _newline_outside_quotes(block: bytes, pos: int, par: int) -> int:
    """Index of the first ``\\n`` at or after ``pos`` with even quote parity, or -1 in this block."""
    while True:
        if par:
            quote = block.find(b'"', pos)
            if quote < 0:
                return -1
            par, pos = 0, quote + 1
        newline = block.find(b"\n", pos)
        if newline < 0:
            return -1
        quote = block.find(b'"', pos, newline)
        if quote < 0:
            return newline
        par, pos = 1, quote + 1
