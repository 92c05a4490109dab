"""JSON Lines: one object per line; large files cut at any newline (``cuts``), read line by line.

Bad records: ``invalid_utf8`` (also a lone surrogate escape, ``"\\ud83d"``, which no UTF-8 text holds),
``json_invalid``, ``json_not_object``, ``duplicate_key`` (an object, top-level or nested, holding a key
twice: never read as its last value), ``record_too_large``, ``gzip_truncated`` and ``gzip_invalid``.
A file holding one JSON array is an ``InputError``.

Column-wise path (``framed_batches``): for a schema of scalars, the unit is read in blocks of whole
lines (``jsonl_block``); compiled code parses a block straight to columns where that is provably
exact, else its lines are parsed as above and gathered into batches of columns; both are encoded by
``example.columnar`` (the same bytes as row by row). A batch holding a bad line or a value the row
encoder must judge raises ``Unsupported`` before it is given.
"""
from __future__ import annotations

import io
import json
from collections.abc import Iterator
from itertools import repeat
from typing import TYPE_CHECKING

from shardprep import fs
from shardprep.example import columnar
from shardprep.formats.base import Bad, Format, InputError, InputFile, Record, Unsupported, WorkUnit, lone_surrogate
from shardprep.formats.cuts import line_units
from shardprep.formats.jsonl_block import block_bytes, block_columns, blocks, native_spec
from shardprep.formats.reading import (
    BOM,
    READ_BLOCK,
    LongLine,
    StreamError,
    open_input,
    read_head,
    read_lines,
    too_large,
)

if TYPE_CHECKING:
    from shardprep.framing import FramedBatch
    from shardprep.schema import Schema

try:  # optional fast path; any line it refuses or might read differently goes through json
    import orjson
except ImportError:  # pragma: no cover - depends on the environment
    orjson = None

__all__ = ["JsonLinesFormat"]

_DIGITS_TO_ZERO = bytes.maketrans(b"123456789", b"000000000")
# orjson reads integers outside [-2**63, 2**64) as floats, json keeps them exact: text holding a run of
# 20 digits, or of 19 after a minus sign, is read by json.
_LONG_NUMBERS = (b"0" * 20, b"-" + b"0" * 19)


class JsonLinesFormat(Format):
    """JSON Lines (``.jsonl``, ``.json``, ``.ndjson``): rows are the objects as parsed."""

    name = "jsonl"
    gives_columns = True
    column_wise_min_bytes = 64 << 10  # a group's smaller files: the per-line path (the block reader's fixed cost)
    extensions = (".jsonl", ".json", ".ndjson")

    def plan(self, file: InputFile, unit_bytes: int) -> list[WorkUnit]:
        check_json_lines(file)
        return line_units(file, unit_bytes, quotes=False)

    def read(self, unit: WorkUnit) -> Iterator[Record]:
        return read_jsonl(unit)

    def column_wise(self, unit: WorkUnit, schema: Schema, extra_fields: str) -> bool:
        return columnar.supports(schema)

    def framed_batches(self, unit: WorkUnit, schema: Schema, extra_fields: str) -> Iterator[FramedBatch]:
        return framed_jsonl(unit, schema, extra_fields)


def check_json_lines(file: InputFile) -> None:
    """Refuses a file holding one JSON array (every record would be bad): JSON Lines has one object per line."""
    try:
        head, _ = read_head(file, 4096)
    except OSError:
        return  # unreadable here: the reader reports it
    if head.removeprefix(BOM).lstrip().startswith(b"["):
        raise InputError(f"{file.url!r} holds a JSON array, not JSON Lines (one object per line): convert it, e.g. "
                         "jq -c '.[]' in.json > out.jsonl")


def json_only(raw: bytes) -> bool:
    """Whether ``raw`` (a line or a block of lines) may hold a number orjson reads differently from json."""
    digits = raw.translate(_DIGITS_TO_ZERO)
    return _LONG_NUMBERS[0][1:] in digits and any(run in digits for run in _LONG_NUMBERS)  # one search when clean


class DuplicateKey(Exception):
    """Raised by ``strict_pairs`` (not a ValueError: json.loads lets it through unchanged)."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def strict_pairs(pairs: list[tuple[str, object]]) -> dict:
    """json's ``object_pairs_hook`` refusing a key given twice (json and orjson keep the last silently)."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKey(key)
            seen.add(key)
    return obj


def no_duplicates(raw: bytes, value: object) -> bool:
    """Whether ``value``, parsed from ``raw`` by a reader keeping the last of a repeated key, provably
    held no key twice. Outside strings every colon of a JSON text ends a key: ``raw``'s colons are its
    keys plus the colons of its strings, and the value written back by orjson has one
    colon per key kept plus those of the strings kept; equal counts prove no key was dropped, which a
    ``\\u`` escape (a colon spelled ``\\u003a``) would blur. False: undecided, json with
    ``strict_pairs`` decides."""
    colons = raw.count(b":")
    if type(value) is dict and colons == len(value):  # the common flat row, no colon in its strings
        return True
    if b"\\u" in raw or orjson is None:
        return False
    try:
        return orjson.dumps(value).count(b":") == colons  # orjson writes a colon in a string as is
    except (TypeError, orjson.JSONEncodeError):  # pragma: no cover - a value orjson read but cannot write
        return False


def _duplicate(line: int, key: str, text: str) -> Bad:
    return Bad(line, "duplicate_key", f"line {line} holds an object with the key {key!r} twice", text.rstrip("\r\n"))


def _json_row(raw: bytes, line: int) -> dict | Bad:
    if orjson is not None and not json_only(raw):
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError:
            value = _json_row  # a sentinel: let json decide and word the error
        else:
            if not no_duplicates(raw, value):
                value = _json_row  # json decides, key by key
    else:
        value = _json_row
    if value is _json_row:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            return Bad(line, "invalid_utf8", f"line {line} is not valid UTF-8 (byte {e.start}: {e.reason})", raw.rstrip(b"\r\n"))
        try:
            value = json.loads(text, object_pairs_hook=strict_pairs)
        except DuplicateKey as e:
            return _duplicate(line, e.key, text)
        except (ValueError, RecursionError) as e:
            return Bad(line, "json_invalid", f"line {line} is not valid JSON: {e}", text.rstrip("\r\n"))
        if "\\u" in text and (problem := lone_surrogate(value)):  # orjson refuses them: only json gives one
            return Bad(line, "invalid_utf8", f"line {line} {problem}", text.rstrip("\r\n"))
    if not isinstance(value, dict):
        kind = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(type(value), "a number")
        return Bad(line, "json_not_object", f"line {line} holds {kind}: expected one JSON object {{...}} per line",
                   raw.decode("utf-8", "replace").rstrip("\r\n"))
    return value


def read_jsonl(unit: WorkUnit) -> Iterator[Record]:
    limit = None if unit.file.gzip else unit.end
    line = unit.first_position - 1
    if unit.start == 0 and limit == unit.file.size and fs.is_local(unit.file.url) and (
            limit <= min(READ_BLOCK, unit.max_record_bytes)):  # a whole small file: its lines as read_lines cuts them
        data = fs.read_bytes(unit.file.url, 0, limit + 1)
        if len(data) == limit:
            for raw in io.BytesIO(data.removeprefix(BOM)).readlines():
                line += 1
                if raw.isspace() or not raw:
                    continue
                yield line, _json_row(raw, line)
            return
    with open_input(unit.file, unit.start) as stream:
        try:
            for offset, raw in read_lines(stream, unit.start, unit.max_record_bytes):
                if limit is not None and offset >= limit:
                    return
                line += 1
                if isinstance(raw, LongLine):
                    yield line, too_large(line, raw, unit.max_record_bytes)
                    continue
                if offset == 0 and raw.startswith(BOM):
                    raw = raw[3:]
                if raw.isspace() or not raw:
                    continue
                yield line, _json_row(raw, line)
        except StreamError as e:
            yield line + 1, Bad(line + 1, e.reason, f"line {line + 1}: {e.detail}", e.partial)


FAST_BATCH_ROWS = 8192  # lines per batch of a block the compiled reader declines


def framed_jsonl(unit: WorkUnit, schema: Schema, extra_fields: str) -> Iterator[FramedBatch]:
    """The unit's rows as framed TFRecord batches, encoded column-wise; see the module docs."""

    spec, bom = native_spec(schema), unit.start == 0
    for block in blocks(unit, block_bytes(len(schema))):
        got = block_columns(block, schema, spec, extra_fields=extra_fields, max_record_bytes=unit.max_record_bytes,
                            bom=bom)
        if got is None:
            yield from _line_by_line(block, bom, unit.max_record_bytes, schema, extra_fields)
        elif got[1]:
            yield from columnar.framed_batches(schema, *got)
        bom = False


def _line_by_line(block: bytes, bom: bool, max_record_bytes: int, schema: Schema,
                  extra_fields: str) -> Iterator[FramedBatch]:
    """A block's lines parsed as ``read_jsonl`` does, in batches of at most ``FAST_BATCH_ROWS`` lines."""

    lines = io.BytesIO(block).readlines()  # the lines as reading.read_lines cuts them
    if any(len(raw) > max_record_bytes for raw in lines):
        raise Unsupported("a line over the record limit")
    if bom and lines and lines[0].startswith(BOM):
        lines[0] = lines[0][3:]
    bulk = orjson is not None and not json_only(block)  # no line needs json: orjson reads them all
    for first in range(0, len(lines), FAST_BATCH_ROWS):
        rows = _parsed(lines[first:first + FAST_BATCH_ROWS], bulk)
        if rows:
            yield from columnar.framed_batches(schema, _columns(rows, schema, extra_fields), len(rows))


def _parsed(lines: list[bytes], bulk: bool) -> list[dict | Bad]:
    """The lines' rows as ``_json_row`` gives them, blank lines skipped: with ``bulk``, one orjson ``map``
    over them all (no Python step per line) when it reads every line to an object; else line by line."""
    if bulk:
        try:
            rows = list(map(orjson.loads, lines))
        except (ValueError, RecursionError):  # a blank or bad line: line by line below words it
            pass
        else:
            if set(map(type, rows)) == {dict}:
                colons = list(map(bytes.count, lines, repeat(b":")))
                if colons != list(map(len, rows)):  # a colon in a string, a nested object, or a key twice
                    for i, (raw, row) in enumerate(zip(lines, rows)):
                        if colons[i] != len(row) and not no_duplicates(raw, row):
                            rows[i] = _json_row(raw, 0)
                return rows
    return [_json_row(raw, 0) for raw in lines if not (raw.isspace() or not raw)]


def _columns(rows: list, schema: Schema, extra_fields: str) -> dict:
    if any(type(row) is not dict for row in rows):
        raise Unsupported("a bad line: the per-record path words its dead letter")
    columns = columnar.from_rows(schema, rows, extra_fields)
    if columns is None:
        raise Unsupported("a value the row encoder must judge (type, range, missing or extra field)")
    return columns
