"""Small CSV files read whole: what ``source`` reads of them, without its per-line machinery.

``source`` stays the reference; this module answers for it where a file's text is all in memory:

- ``known_header``: ``source.read_header`` of a file whose first line is one met before
  (``remember_header``: the same bytes, the same dialect), checking only its rows' field counts;
- ``whole_file_rows``: ``source.read_csv``'s rows of a unit that is a whole small file.

Both feed the csv module the lines ``source`` feeds it, in one ``csv.reader``, and return None
wherever the reference could say anything else (a record the csv module refuses, a quote left
open at the end, bytes that are not UTF-8, a row of another field count): ``source`` then reads
the file itself.
"""
from __future__ import annotations

import csv
from collections.abc import Iterator

from shardprep.formats.csv.dialect import CsvDialect

__all__ = ["KNOWN_HEADERS", "known_header", "remember_header", "whole_file_rows"]

KNOWN_HEADERS = 256  # header lines remembered, at most (a run's files share a few)
_known: dict[tuple[CsvDialect, bytes], tuple[str, ...]] = {}  # (dialect, line 1 with its "\n") -> names


class _OpenQuote(Exception):
    """A record that runs into the end of the text inside quotes (``source``: a ``csv_parse`` dead letter);
    ``row``: the fields the csv module gave it."""

    def __init__(self, row: list[str]) -> None:
        super().__init__("a quote left open at the end")
        self.row = row


def remember_header(dialect: CsvDialect, line: bytes, names: tuple[str, ...]) -> None:
    """Notes that a file whose line 1 is ``line`` (with its ``\\n``: one whole record) has ``names``."""
    if len(_known) < KNOWN_HEADERS:
        _known[(dialect, line)] = names


def known_header(head: bytes, dialect: CsvDialect, rows: int) -> tuple[str, ...] | None:
    """``source.read_header`` of a file whose whole text is ``head``, or None: its line 1 was remembered
    and its first ``rows`` records after it do not all have one other field count than the names."""
    end = head.find(b"\n") + 1
    names = _known.get((dialect, head[:end])) if end else None
    if names is None:
        return None
    counts = set()
    checked = 0
    try:
        for _, row in _records(head[end:].decode("utf-8", "surrogateescape"), dialect.delimiter):
            if checked == rows:
                break
            counts.add(len(row))
            checked += 1
    except csv.Error:
        return None
    except _OpenQuote as e:  # the last record, a dead letter later: its fields are checked all the same
        if checked < rows:
            counts.add(len(e.row))
    return None if len(counts) == 1 and len(names) not in counts else names


def whole_file_rows(data: bytes, *, columns: tuple[str, ...], dialect: CsvDialect, first_position: int,
                    lists: bool) -> list[tuple[int, dict | list]] | None:
    """``source.read_csv``'s (position, row) of a unit that is all of a file whose bytes are ``data``, or
    None where a record would be a dead letter."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    nulls = frozenset(dialect.null_values)
    out: list[tuple[int, dict | list]] = []
    try:
        records = _records(text.removeprefix("\ufeff"), dialect.delimiter)
        if dialect.header:
            next(records, None)
        for first, row in records:
            if len(row) != len(columns):
                return None
            position = first_position + first
            if nulls.isdisjoint(row):
                out.append((position, row if lists else dict(zip(columns, row))))
            elif lists:
                out.append((position, [None if v in nulls else v for v in row]))
            else:
                out.append((position, {c: None if v in nulls else v for c, v in zip(columns, row)}))
    except (csv.Error, _OpenQuote):
        return None
    return out


def _records(text: str, delimiter: str) -> Iterator[tuple[int, list[str]]]:
    """(index of its first line, fields) of each record of ``text``, blank lines skipped, read as
    ``source`` reads lines: split after each ``\\n``, then one more ``\\n`` that only a record left
    inside quotes takes (``_OpenQuote``). Raises ``csv.Error`` for a record the csv module refuses."""
    lines = text.split("\n")
    last = lines.pop()
    lines = [line + "\n" for line in lines]
    if last:
        lines.append(last)
    reader = csv.reader([*lines, "\n"], delimiter=delimiter)
    done = 0  # lines read
    for row in reader:
        first, done = done, reader.line_num
        if done > len(lines):
            if row:
                raise _OpenQuote(row)
            return
        if row:
            yield first, row
