"""Compact JSON (``json.dumps(doc, separators=(",", ":"))``, byte for byte) of a document holding a large
object whose values are a few shared objects: a wide table's features, 50,000 names and a few distinct
specs. json's encoder writes each value anew; here each distinct
value object is encoded once and its text spliced in after every key that holds it.
"""
from __future__ import annotations

import json
import operator
from json.encoder import encode_basestring_ascii
from typing import Any

__all__ = ["SHARED_MIN", "dumps"]

SHARED_MIN = 1000  # entries from which an object is checked for shared values


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
