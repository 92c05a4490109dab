"""Compact JSON (``json.dumps(doc, separators=(",", ":"))``, byte for byte) of a document holding a large
object whose values are a few shared objects: a wide table's features, 50,000 names and a few distinct
specs. json's encoder writes each value anew (~0.3 s for a 7 MB ``features.json``); here each distinct
value object is encoded once and its text spliced in after every key that holds it.
"""
from __future__ import annotations

import json
from json.encoder import encode_basestring_ascii
from typing import Any

__all__ = ["SHARED_MIN", "dumps"]

SHARED_MIN = 1000  # entries from which an object is checked for shared values


def dumps(doc: Any, *, sort_keys: bool = False) -> str:
    """``json.dumps(doc, separators=(",", ":"), sort_keys=sort_keys)``."""
    if type(doc) is not dict or not all(type(key) is str for key in doc):
        return json.dumps(doc, separators=(",", ":"), sort_keys=sort_keys)
    items = sorted(doc.items()) if sort_keys else doc.items()
    if len(doc) < SHARED_MIN:  # a small object: its values may hold a large one
        return "{" + ",".join(encode_basestring_ascii(key) + ":" + dumps(value, sort_keys=sort_keys)
                              for key, value in items) + "}"
    texts = {id(value): None for value in doc.values()}
    if len(texts) * 4 > len(doc):  # mostly distinct values: nothing to share
        return json.dumps(doc, separators=(",", ":"), sort_keys=sort_keys)
    parts = []
    for key, value in items:
        text = texts[id(value)]
        if text is None:
            text = texts[id(value)] = dumps(value, sort_keys=sort_keys)
        parts.append(encode_basestring_ascii(key) + ":" + text)
    return "{" + ",".join(parts) + "}"
