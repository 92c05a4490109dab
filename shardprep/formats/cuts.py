"""Cutting a large line-based file (CSV, JSON Lines) into work units that each start at a record.

The planner reads the file once with C-speed ``bytes.count``/``find`` and moves each nominal cut
(every ``unit_bytes``) to just after the first newline at or after it that is outside quotes (JSON
Lines: any newline), recording the cut's byte offset and 1-based line number; a unit owns the
records whose first byte lies in ``[start, end)``. An empty file, a gzip file or a file of at most
``unit_bytes`` is one unit.

Quotes (CSV): RFC 4180 writes a quote inside a quoted field as two quotes, so the parity of the
number of ``"`` characters before a byte says whether it is inside a quoted field. A stray quote in
an unquoted field (``5" screen``) flips the parity for the rest of the file: if the file's total
count of quotes is odd the file is read as one unit; if two stray quotes bracket quoted fields that
hold newlines, a cut can land inside a record, which the CSV reader of the unit before it detects
(its last record runs past the cut) and reports as a fatal ``InputError``, never as wrong rows.
"""
from __future__ import annotations

from shardprep import fs
from shardprep.formats.base import InputFile, WorkUnit

__all__ = ["find_cuts", "line_units"]

_SCAN_BLOCK = 8 << 20


def line_units(file: InputFile, unit_bytes: int, *, columns: tuple[str, ...] = (), quotes: bool) -> list[WorkUnit]:
    """The units of a line-based file: byte ranges starting at records (see the module docs)."""
    whole = WorkUnit(file, 0, 0, file.size, 1, columns)
    if file.gzip or file.size <= unit_bytes:
        return [whole]
    cuts, odd_quotes = find_cuts(file.url, unit_bytes, quotes=quotes)
    if odd_quotes:  # a stray or unterminated quote: parity is unreliable, read the file in one piece
        return [whole]
    starts = [(0, 1), *cuts]
    ends = [offset for offset, _ in cuts] + [file.size]
    return [WorkUnit(file, i, start, end, line, columns) for i, ((start, line), end) in enumerate(zip(starts, ends))]


def find_cuts(url: str, unit_bytes: int, *, quotes: bool) -> tuple[list[tuple[int, int]], bool]:
    """(offset, 1-based line) of each unit start after the first, and whether the file's quote count is odd.

    Each cut is just after the first newline at or after a multiple of ``unit_bytes`` whose quote
    parity is even (outside quotes); it is found with C-speed ``count``/``find`` calls only.
    """
    cuts: list[tuple[int, int]] = []
    target = unit_bytes
    base, parity, line = 0, 0, 1  # file offset, quote parity and line number at the block's start
    with fs.open_file(url, "rb") as f:
        while block := f.read(_SCAN_BLOCK):
            pos, par, ln = 0, parity, line  # the same, at block[pos]
            while target < base + len(block):
                rel = max(target - base, pos)
                if quotes:
                    par ^= block.count(b'"', pos, rel) & 1
                ln += block.count(b"\n", pos, rel)
                pos = rel
                newline = _newline_outside_quotes(block, pos, par) if quotes else block.find(b"\n", pos)
                if newline < 0:
                    break  # look on in the next block, with the parity at its start
                ln += block.count(b"\n", pos, newline + 1)
                par = 0
                pos = newline + 1
                cuts.append((base + pos, ln))
                target = -(-(base + pos) // unit_bytes) * unit_bytes
            if quotes:
                parity ^= block.count(b'"') & 1
            line += block.count(b"\n")
            base += len(block)
    return [cut for cut in cuts if cut[0] < base], bool(parity)


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
