"""The dtype of a text (CSV) column by ``shardprep.schema``'s rules, decided for the whole column at once.

The rule is value by value (``text_kind``): a column is ``int64`` when every non-empty value is an
int within int64, ``string`` when some int does not fit (or some value is not a number, or all are
empty), else ``float32``. A wide table's sample is a million values or more, so ``text_dtype``
answers with a few C-level passes over the column (one ``join``, ``map(float)``, ``map(int)``)
and takes the per-value rule only for a column those passes cannot settle (empty or blank values,
ints beyond ``int``'s digit limit). A test checks that both give the same answer.
"""
from __future__ import annotations

import operator
from collections import deque
from collections.abc import Mapping, Sequence
from itertools import chain, repeat
from typing import Any

__all__ = ["INT64_MAX", "INT64_MIN", "big_int_candidates", "kinds_dtype", "text_dtype", "text_kind", "uniform_dtype"]

INT64_MIN = -(1 << 63)  # the int64 range (``shardprep.schema`` gives them to the rest)
INT64_MAX = (1 << 63) - 1
# No value holding one of these parses as an int (int takes digits, signs, '_' and whitespace only),
# so a value that parses as a float and holds one is a float: '.', an exponent, nan or inf(inity).
_FLOAT_ONLY = ".eEnNiI"


def text_kind(value: str) -> str | None:
    """``"int"``, ``"bigint"``, ``"float"``, ``"string"`` or ``None`` (empty) for one CSV value."""
    if len(value) < 19 and value.isascii() and value.isdigit():  # plain digits below 10**18: no int() parse
        return "int"
    s = value.strip()
    if not s:
        return None
    try:
        n = int(s)
    except ValueError:
        pass
    else:
        return "int" if INT64_MIN <= n <= INT64_MAX else "bigint"
    try:
        float(s)
    except ValueError:
        return "string"
    return "float"


def kinds_dtype(values: Sequence[Any]) -> str:
    """The rule, value by value (the ``str`` values; ``None`` is a missing value): stops at a string."""
    kinds = set()
    for v in values:
        if isinstance(v, str):
            kind = text_kind(v)
            if kind == "string":
                return "string"
            kinds.add(kind)
    kinds.discard(None)
    if not kinds:
        return "string"
    if kinds == {"int"}:
        return "int64"
    if kinds <= {"int", "bigint"}:
        return "string"
    return "float32"


def text_dtype(values: Sequence[Any]) -> str:
    """``kinds_dtype(values)``, for a column of numbers without a Python step per value."""
    try:
        joined, strs = "".join(values), values  # text only (CSV rows without a null value)
    except TypeError:
        strs = [v for v in values if isinstance(v, str)]
        joined = "".join(strs)
    if not strs:
        return "string"
    if joined.isascii() and joined.isdigit() and max(map(len, strs)) < 19:  # plain digits (some non-empty)
        return "int64"
    try:
        deque(map(float, strs), maxlen=0)  # every value a number (an empty or blank one raises too)
    except ValueError:
        return kinds_dtype(strs)
    if any(c in joined for c in _FLOAT_ONLY):  # some value is a float, none a string
        return "float32"
    try:
        ints = list(map(int, strs))  # all ints then (as float parsed them); int's digit limit raises
    except ValueError:
        return kinds_dtype(strs)
    return "int64" if INT64_MIN <= min(ints) and max(ints) <= INT64_MAX else "string"


def uniform_dtype(columns: Mapping[str, Sequence[Any]], text: bool) -> str | None:
    """The dtype of every column when the whole table settles it at once, else None (column by
    column): typed values all of one plain type (float, str, bytes, bool, or int within int64), or
    text that is all plain digits (below 10**18) with a non-empty value in every column. A wide
    table is often all one type; its columns then cost no step each."""
    cells = list(chain.from_iterable(columns.values()))
    if not cells:
        return None
    if text:
        try:
            joined = "".join(cells)
        except TypeError:  # a null value
            return None
        if joined.isascii() and joined.isdigit() and max(map(len, cells)) < 19 and all(map(any, columns.values())):
            return "int64"
        return None
    types = set(map(type, cells))
    if len(types) != 1:
        return None
    kind = types.pop()
    if kind is int:
        return "int64" if INT64_MIN <= min(cells) and max(cells) <= INT64_MAX else None
    return {float: "float32", str: "string", bytes: "string", bool: "int64"}.get(kind)


def big_int_candidates(values: Sequence[Any]) -> list[Any]:
    """The values of a float32 column that may be integers above 2**24, in order (the rest cannot
    be): text of at least 8 characters and no '.', and every value that is not a float or None."""
    types = set(map(type, values))
    if types <= {float, type(None)}:
        return []
    if types == {list} and set(map(type, chain.from_iterable(values))) <= {float, type(None)}:  # decoded Examples
        return []
    if types == {str}:
        if max(map(len, values)) < 8 or all(map(operator.contains, values, repeat("."))):  # a float's text
            return []
        return [v for v in values if len(v) >= 8 and "." not in v]
    return [v for v in values if type(v) is not float and v is not None]
