"""CSV dialects: the delimiter, whether the first line is a header, column names, and the null values.

A ``CsvDialect`` travels with each CSV ``InputFile`` so every reader (per-record, column-wise, the
sampler) reads a file the same way. ``sniff_delimiter`` picks the delimiter from a file's first
lines when ``--delimiter`` is not given: of ``, ; \\t |``, the one that splits every sampled line
into the same number (more than one) of fields, the most fields winning, ties in that order.
"""
from __future__ import annotations

import collections
import csv
import dataclasses
import io

__all__ = ["DEFAULT_NULL_VALUES", "SNIFFED_DELIMITERS", "CsvDialect", "or_default", "parse_delimiter", "parse_names",
           "sniff_delimiter"]

SNIFFED_DELIMITERS = (",", ";", "\t", "|")
DEFAULT_NULL_VALUES = ("", "NA", "N/A", "null", "NULL", "None", "NaN", "nan")  # --null-values' default
_NAMED = {"tab": "\t", "\\t": "\t", "comma": ",", "semicolon": ";", "pipe": "|", "space": " "}
SNIFF_LINES = 20
SNIFF_BYTES = 1 << 16


@dataclasses.dataclass(frozen=True)
class CsvDialect:
    """How one CSV file is read. ``column_names`` replace the header's (``()``: the header's names;
    without a header, ``c0``, ``c1``, ... as many as line 1 has fields: ``formats.csv.source.read_header``)."""

    delimiter: str = ","
    header: bool = True
    column_names: tuple[str, ...] = ()
    null_values: tuple[str, ...] = DEFAULT_NULL_VALUES

    def __post_init__(self) -> None:
        if len(self.delimiter) != 1 or self.delimiter in '"\r\n':
            raise ValueError(f"delimiter {self.delimiter!r}: expected one character other than a quote or newline")

    def describe(self) -> str:
        return f"delimiter {self.delimiter!r}, {'a header line' if self.header else 'no header'}"


PLAIN = CsvDialect(null_values=())  # a file read without ``resolve_dialects`` (library callers): no null values


def or_default(dialect: CsvDialect | None) -> CsvDialect:
    """A file's dialect, or ``PLAIN`` (comma, a header line, no null values) where none was set; the
    command line always sets one (``formats.csv.source.resolve_dialects``, the default null values)."""
    return dialect or PLAIN


def parse_delimiter(text: str) -> str:
    """``--delimiter``: one character, or a name (``tab``, ``\\t``, ``comma``, ``semicolon``, ``pipe``, ``space``)."""
    value = _NAMED.get(text.lower() if len(text) > 1 else text, text)
    if len(value) != 1 or value in '"\r\n':
        raise ValueError(f"--delimiter {text!r}: expected one character (e.g. ';' or '|') or tab, space, comma, "
                         "semicolon, pipe")
    return value


def parse_names(text: str, flag: str) -> tuple[str, ...]:
    """A comma-separated list of names (``--column-names``, ``--required``): no empty or repeated name."""
    names = tuple(n.strip() for n in text.split(","))
    if not all(names):
        raise ValueError(f"{flag} {text!r}: a name is empty; expected names separated by commas, e.g. a,b,c")
    repeated = sorted(n for n, k in collections.Counter(names).items() if k > 1)
    if repeated:
        raise ValueError(f"{flag} {text!r}: {', '.join(repeated)} is given twice")
    return names


def sniff_delimiter(head: bytes, complete: bool) -> str | None:
    """The delimiter of the file whose first bytes are ``head`` (``complete``: the whole file); None when
    no candidate splits the sampled lines consistently into more than one field."""
    text = head.decode("utf-8", "replace").removeprefix("\ufeff")
    lines = text.splitlines(keepends=True)
    if not complete and len(lines) > 1:
        lines = lines[:-1]  # the last line may be cut
    sample = "".join(lines[:SNIFF_LINES])
    best, best_fields = None, 1
    for candidate in SNIFFED_DELIMITERS:
        try:
            counts = {len(row) for row in csv.reader(io.StringIO(sample), delimiter=candidate) if row}
        except csv.Error:
            continue
        if len(counts) == 1 and (fields := counts.pop()) > best_fields:
            best, best_fields = candidate, fields
    return best
