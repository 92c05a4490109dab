"""JSON byte for byte as ``json.dumps`` writes it, fast for the shapes a manifest grows to.

``dumps``: compact JSON (``json.dumps(doc, separators=(",", ":"))``) of a document holding a large
object whose values are a few shared objects: a wide table's features, 50,000 names and a few distinct
specs. json's encoder writes each value anew; here each distinct
value object is encoded once and its text spliced in after every key that holds it.

``indented``: ``json.dumps(doc, indent=...)`` (json's Python encoder, value by value) of a document whose
top-level values include long lists of flat objects (a manifest's 50,000 sources): each such list is
written from a template, in its place, and every other value by json.
"""
from __future__ import annotations

import json
import operator
import secrets
from json.encoder import encode_basestring_ascii
from typing import Any

__all__ = ["LONG_LIST", "SHARED_MIN", "dumps", "indented"]

SHARED_MIN = 1000  # entries from which an object is checked for shared values
LONG_LIST = 1000  # items from which a top-level list of flat objects is written from a template


def dumps(doc: Any, *, sort_keys: bool = False) -> str:
    """``json.dumps(doc, separators=(",", ":"), sort_keys=sort_keys)``."""
    if type(doc) is not dict or not all(type(key) is str for key in doc):
        return json.dumps(doc, separators=(",", ":"), sort_keys=sort_keys)
    if len(doc) < SHARED_MIN:  # a small object: its values may hold a large one
        items = sorted(doc.items()) if sort_keys else doc.items()
        return "{" + ",".join(encode_basestring_ascii(key) + ":" + dumps(value, sort_keys=sort_keys)
                              for key, value in items) + "}"
    keys = sorted(doc) if sort_keys else list(doc)
    ids = list(map(id, map(doc.__getitem__, keys)))
    if len(set(ids)) * 4 > len(doc):  # mostly distinct values: nothing to share
        return json.dumps(doc, separators=(",", ":"), sort_keys=sort_keys)
    texts = {}  # by value object: ":" and its text
    for key, i in zip(keys, ids):
        if i not in texts:
            texts[i] = ":" + dumps(doc[key], sort_keys=sort_keys)
    return "{" + ",".join(map(operator.add, map(encode_basestring_ascii, keys), map(texts.__getitem__, ids))) + "}"


def indented(doc: Any, *, indent: int, sort_keys: bool = False) -> str:
    """``json.dumps(doc, indent=indent, sort_keys=sort_keys)``.

    Each top-level list of at least ``LONG_LIST`` objects of the same string keys, in the same order, and
    string or int values, stands in for a placeholder string while json writes the rest; the placeholder
    (random, and found exactly once, else json writes it all) is then replaced by the list's text.
    """
    pad = " " * indent
    lists = {key: written for key, value in (doc.items() if type(doc) is dict else ())
             if type(value) is list and len(value) >= LONG_LIST and (written := _list_text(value, pad, sort_keys))}
    if not lists:
        return json.dumps(doc, indent=indent, sort_keys=sort_keys)
    tokens = {key: f"\0{secrets.token_hex(16)}" for key in lists}
    text = json.dumps({key: tokens.get(key, value) for key, value in doc.items()}, indent=indent, sort_keys=sort_keys)
    for key, listed in lists.items():
        token = json.dumps(tokens[key])
        if text.count(token) != 1:
            return json.dumps(doc, indent=indent, sort_keys=sort_keys)
        text = text.replace(token, listed, 1)
    return text


def _list_text(items: list, pad: str, sort_keys: bool) -> str | None:
    """A top-level value's list of objects as ``json.dumps(..., indent=len(pad))`` writes it, or None
    unless they all have the first one's string keys, in its order, and string or int values (no bools)."""
    first = items[0]
    keys = tuple(first) if type(first) is dict else ()
    if not keys or not all(type(k) is str for k in keys) or not all(
            type(item) is dict and tuple(item) == keys for item in items):
        return None
    columns = []
    for key in sorted(keys) if sort_keys else keys:
        column = [item[key] for item in items]
        kinds = set(map(type, column))
        if not kinds <= {str, int}:
            return None
        columns.append(list(map(encode_basestring_ascii, column)) if kinds == {str} else
                       list(map(int.__repr__, column)) if kinds == {int} else
                       [encode_basestring_ascii(v) if type(v) is str else int.__repr__(v) for v in column])
    template = (pad * 2 + "{\n" + ",\n".join(pad * 3 + encode_basestring_ascii(k).replace("%", "%%") + ": %s"
                                              for k in (sorted(keys) if sort_keys else keys)) + "\n" + pad * 2 + "}")
    return "[\n" + ",\n".join([template % values for values in zip(*columns)]) + "\n" + pad + "]"
