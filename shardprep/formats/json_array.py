"""A ``.json`` file holding one JSON array of objects: each object is a record; the file is one work unit.

The file is parsed whole (in memory), so it suits files of up to a few hundred MB; larger data
belongs in JSON Lines. Positions are 1-based places in the array. Bad records: ``json_invalid``
(the file is not valid JSON: one dead letter for the file), ``invalid_utf8`` (the file, or an element
holding a lone surrogate escape), ``json_not_object``
(an element that is not an object), ``duplicate_key`` (an element holding, at any depth, an object
with a key twice), ``gzip_truncated`` and ``gzip_invalid``.
"""
from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Iterator

from shardprep import fs
from shardprep.formats.base import Bad, Format, InputFile, Record, WorkUnit, lone_surrogate
from shardprep.formats.reading import BOM, open_input

__all__ = ["JsonArrayFormat", "is_json_array"]

_HEAD = 4096


def is_json_array(url: str, gz: bool) -> bool:
    """Whether the file's first non-blank byte (after a BOM) opens a JSON array."""
    try:
        with fs.open_file(url, "rb") as raw:
            head = gzip.GzipFile(fileobj=raw).read(_HEAD) if gz else raw.read(_HEAD)
    except (EOFError, OSError, zlib.error):
        return False  # unreadable here: the JSON Lines reader reports it
    return head.removeprefix(BOM).lstrip().startswith(b"[")


class JsonArrayFormat(Format):
    """A JSON array of objects (``.json`` files whose content starts with ``[``; detected, not by extension)."""

    name = "json"
    extensions = ()

    def plan(self, file: InputFile, unit_bytes: int) -> list[WorkUnit]:
        return [WorkUnit(file, 0, 0, file.size, 1)]

    def read(self, unit: WorkUnit) -> Iterator[Record]:
        return read_json_array(unit)


class _Twice(dict):
    """An object parsed with a key given twice (kept whole: its element is dead letter ``duplicate_key``)."""

    key = ""


def _marking_pairs(found: list[str]):
    def hook(pairs: list[tuple[str, object]]) -> dict:
        obj = dict(pairs)
        if len(obj) == len(pairs):
            return obj
        seen: set[str] = set()
        twice = _Twice(obj)
        twice.key = next(k for k, _ in pairs if k in seen or seen.add(k))
        found.append(twice.key)
        return twice
    return hook


def _twice(value: object) -> str | None:
    """The first repeated key in ``value`` at any depth, or None."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, _Twice):
            return v.key
        if isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return None


def read_json_array(unit: WorkUnit) -> Iterator[Record]:
    """(position, object) per element of the array, or one ``Bad`` for a file that cannot be parsed."""
    try:
        with open_input(unit.file, 0) as stream:
            data = stream.read()
    except EOFError as e:
        yield 1, Bad(1, "gzip_truncated", f"the gzip data ends early ({e})", b"")
        return
    except (gzip.BadGzipFile, zlib.error) as e:
        yield 1, Bad(1, "gzip_invalid", f"the gzip data is corrupt ({e})", b"")
        return
    try:
        text = data.removeprefix(BOM).decode("utf-8")
    except UnicodeDecodeError as e:
        yield 1, Bad(1, "invalid_utf8", f"the file is not valid UTF-8 (byte {e.start}: {e.reason})", data[:1024])
        return
    try:
        value = json.loads(text, object_pairs_hook=_marking_pairs(found := []))
    except (ValueError, RecursionError) as e:
        yield 1, Bad(1, "json_invalid", f"the file is not valid JSON: {e}", text[:1024])
        return
    if not isinstance(value, list):
        yield 1, Bad(1, "json_not_object", "the file holds no JSON array: expected [{...}, {...}]", text[:1024])
        return
    escapes = "\\u" in text  # only an escape spells a lone surrogate
    for i, item in enumerate(value, 1):
        if isinstance(item, dict) and found and (key := _twice(item)) is not None:
            yield i, Bad(i, "duplicate_key", f"element {i} of the array holds an object with the key {key!r} twice",
                         json.dumps(item)[:1024])
        elif isinstance(item, dict) and escapes and (problem := lone_surrogate(item)):
            yield i, Bad(i, "invalid_utf8", f"element {i} of the array {problem}", json.dumps(item)[:1024])
        elif isinstance(item, dict):
            yield i, item
        else:
            yield i, Bad(i, "json_not_object", f"element {i} of the array is not an object: expected {{...}}",
                         json.dumps(item)[:1024])
