"""The launcher-side cut finder that ``formats.cuts`` replaced: the reference the in-pipeline cuts must equal.

``find_cuts`` read every byte of a large CSV / JSON Lines file on the launcher. It is kept here,
unchanged, only so tests can check that the cuts found inside the pipeline (``formats.cuts.resolve``
over the range counts) land on exactly the same bytes and line numbers.
"""
from __future__ import annotations

from shardprep import fs
from shardprep.formats.cuts import _newline_outside_quotes  # the boundary rule, shared with the product

__all__ = ["find_cuts", "reference_ranges"]

_SCAN_BLOCK = 8 << 20


def reference_ranges(url: str, size: int, unit_bytes: int, *, quotes: bool) -> list[tuple[int, int, int]]:
    """(start, end, first line) of each unit the old planner made (one unit: odd quotes, or size <= unit_bytes)."""
    if size <= unit_bytes:
        return [(0, size, 1)]
    cuts, odd = find_cuts(url, unit_bytes, quotes=quotes)
    if odd:
        return [(0, size, 1)]
    starts = [(0, 1), *cuts]
    ends = [offset for offset, _ in cuts] + [size]
    return [(start, end, line) for (start, line), end in zip(starts, ends)]


def find_cuts(url: str, unit_bytes: int, *, quotes: bool) -> tuple[list[tuple[int, int]], bool]:
    """(offset, 1-based line) of each unit start after the first, and whether the file's quote count is odd."""
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
