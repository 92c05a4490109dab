"""The types of a manifest's sections, checked once on load (``manifest.Manifest.from_json``).

Every reader (verify, inspect, report, the trainer) takes the manifest's values as this schema says
they are, so a manifest that breaks it is refused on load with one line, ``manifest is malformed:
<field path>: <what was expected>, found <value>`` (a ``ManifestError``: exit 2), instead of a
``KeyError`` or ``TypeError`` somewhere in a reader. Optional fields stay optional (older tools
wrote fewer); keys this tool does not know are accepted, so a newer writer's additions (a shard's
``index``) do not break an older reader.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from shardprep import members
from shardprep.errors import ManifestError

__all__ = ["Check", "count", "count_key", "crc32c", "flag", "malformed", "mapping", "number", "positive", "statistics", "string", "text",
           "typed_key"]

Check = Callable[[Any, str], Any]  # (value, field path) -> the value, or ManifestError
_ABSENT = object()
_EXPECTED: dict[Check, str] = {}  # what a missing field should have held, for its message


def malformed(where: str, expected: str, value: Any = _ABSENT) -> ManifestError:
    """The one error of a value that breaks the schema."""
    try:
        shown = "missing" if value is _ABSENT else json.dumps(value)[:40]
    except (TypeError, ValueError, RecursionError):
        shown = type(value).__name__
    return ManifestError(f"manifest is malformed: {where}: expected {expected}, found {shown}")


def count(value: Any, where: str) -> int:
    """A non-negative integer: never ``true``, ``9022.9`` or ``" 9022 "``."""
    if type(value) is not int or value < 0:
        raise malformed(where, "a non-negative integer", value)
    return value


def positive(value: Any, where: str) -> int:
    if type(value) is not int or value < 1:
        raise malformed(where, "a positive integer", value)
    return value


def integer(value: Any, where: str) -> int:
    if type(value) is not int:
        raise malformed(where, "an integer", value)
    return value


def number(value: Any, where: str) -> float | int:
    """An int or a float (statistics of data with non-finite values may hold NaN or infinity), never a bool."""
    if type(value) not in (int, float):
        raise malformed(where, "a number", value)
    return value


def flag(value: Any, where: str) -> bool:
    if type(value) is not bool:
        raise malformed(where, "true or false", value)
    return value


def string(value: Any, where: str) -> str:
    if type(value) is not str:
        raise malformed(where, "a string", value)
    return value


def crc32c(value: Any, where: str) -> str:
    if type(value) is not str or len(value) != 8 or any(c not in "0123456789abcdef" for c in value):
        raise malformed(where, "8 lower-case hex digits", value)
    return value


def relative_path(value: Any, where: str) -> str:
    """A path inside the data set folder (``members.check_relative``)."""
    return members.check_relative(string(value, where), field=where)


def list_of(item: Check) -> Check:
    def check(value: Any, where: str) -> list:
        if type(value) is not list:
            raise malformed(where, "a list", value)
        for i, x in enumerate(value):
            item(x, f"{where}[{i}]")
        return value
    _EXPECTED[check] = "a list"
    return check


_TYPE_NAMES = {dict: "an object", list: "a list", str: "a string", int: "an integer", bool: "true or false"}


def typed_key(doc: dict, key: str, kind: type, where: str = "") -> Any:
    """``doc[key]`` if it is exactly of ``kind`` (an int is never a bool here, nor a bool an int)."""
    name = f"{where}.{key}" if where else key
    if key not in doc:
        raise malformed(name, _TYPE_NAMES[kind])
    if type(doc[key]) is not kind:
        raise malformed(name, _TYPE_NAMES[kind], doc[key])
    return doc[key]


def count_key(doc: dict, key: str, where: str) -> int:
    """``doc[key]``, a non-negative integer."""
    if key not in doc:
        raise malformed(f"{where}.{key}", "a non-negative integer")
    return count(doc[key], f"{where}.{key}")


def mapping(value: Any, where: str) -> dict:
    if type(value) is not dict:
        raise malformed(where, "an object", value)
    return value


def fields(value: Any, where: str, *, required: dict[str, Check], optional: dict[str, Check]) -> dict:
    """An object with the ``required`` keys and any of the ``optional`` ones, each checked; other keys pass."""
    mapping(value, where)
    for key, check in required.items():
        if key not in value:
            raise malformed(f"{where}.{key}", _EXPECTED.get(check, "a value"))
        check(value[key], f"{where}.{key}")
    for key, check in optional.items():
        if key in value:
            check(value[key], f"{where}.{key}")
    return value


_EXPECTED.update({count: "a non-negative integer", positive: "a positive integer", integer: "an integer",
                  number: "a number", flag: "true or false", string: "a string", crc32c: "8 lower-case hex digits",
                  relative_path: "a path inside the data set folder", mapping: "an object"})


def _histogram(value: Any, where: str) -> dict:
    fields(value, where, required={"edges": list_of(number), "counts": list_of(count)}, optional={})
    if len(value["edges"]) != len(value["counts"]) + 1:  # the report draws bin i between edges i and i + 1
        raise malformed(f"{where}.edges", f"one more edge than counts ({len(value['counts'])} counts)",
                        f"{len(value['edges'])} edges")
    return value


def _top_entry(value: Any, where: str) -> list:
    if type(value) is not list or len(value) != 2:
        raise malformed(where, "a [value, count] pair", value)
    string(value[0], f"{where}[0]")
    count(value[1], f"{where}[1]")
    return value


def _quantiles(value: Any, where: str) -> dict:
    for key, q in mapping(value, where).items():
        number(q, f"{where}.{key}")
    return value


# A feature's statistics in one split (``shardprep.stats.feature_stats.to_json``): count and missing always.
_FEATURE_STATS = {
    "required": {"count": count, "missing": count},
    "optional": {
        **{k: count for k in ("zeros", "length_min", "length_max", "bytes_min", "bytes_max", "distinct")},
        **{k: number for k in ("min", "max", "mean", "std", "bytes_mean")},
        **{k: flag for k in ("distinct_capped", "distinct_estimated")},
        **{k: _histogram for k in ("histogram", "quantile_histogram", "length_histogram")},
        "quantiles": _quantiles,
        "top": list_of(_top_entry),
    },
}


def statistics(value: Any, where: str = "statistics") -> dict[str, dict[str, Any]]:
    """``split -> feature -> statistics``, each feature's as ``shardprep.stats.feature_stats`` writes them."""
    for split, features in mapping(value, where).items():
        for name, stats in mapping(features, f"{where}.{split}").items():
            fields(stats, f"{where}.{split}.{name}", **_FEATURE_STATS)
    return value


# A text run's entry (``shardprep.text.spec.TextSpec.manifest_entry``): what the trainer and verify read.
_TEXT = {
    "required": {"task": string, "vocab": relative_path, "vocab_size": positive, "max_seq_length": positive},
    "optional": {
        "vocab_num_bytes": count, "vocab_crc32c": crc32c, "cased": flag, "max_predictions_per_seq": count,
        "masked_lm_prob": number, "short_seq_prob": number, "dupe_factor": count, "whole_word_masking": flag,
        "seed": integer, "labels": list_of(string), "corpus": lambda v, w: _text_counts(v, w),
        "dedup": lambda v, w: _text_counts(v, w),
    },
}


def _text_counts(value: Any, where: str) -> dict:
    """``text.corpus`` / ``text.dedup``: counts (and settings), each a number, a string, a list, or an
    object of counts; what the report and inspect show."""
    for key, v in mapping(value, where).items():
        if isinstance(v, dict):
            for k, n in v.items():
                count(n, f"{where}.{key}.{k}")
        elif not isinstance(v, (int, float, str, list)) or isinstance(v, bool):
            raise malformed(f"{where}.{key}", "a number, a string, a list or an object of counts", v)
    return value


def text(value: Any, where: str = "text") -> dict[str, Any]:
    """The ``text`` entry; its vocabulary's size and crc32c come together or not at all."""
    fields(value, where, **_TEXT)
    if ("vocab_num_bytes" in value) != ("vocab_crc32c" in value):
        missing = "vocab_crc32c" if "vocab_num_bytes" in value else "vocab_num_bytes"
        raise malformed(f"{where}.{missing}", "the vocabulary's size and crc32c together")
    return value
