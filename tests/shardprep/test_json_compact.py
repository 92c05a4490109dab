"""A document with shared values is written as json.dumps writes it, byte for byte."""
from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from shardprep import json_compact

_LEAVES = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=4))
_VALUES = st.recursive(_LEAVES, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                        st.dictionaries(st.text(max_size=3), inner, max_size=3)),
                       max_leaves=8)


@given(st.lists(st.text(max_size=6), max_size=30), st.lists(_VALUES, min_size=1, max_size=3), _VALUES, st.booleans())
@settings(max_examples=300, deadline=None)
def test_shared_values_are_spliced_as_json_writes_them(names, shared, other, sort_keys):
    saved, json_compact.SHARED_MIN = json_compact.SHARED_MIN, 4  # small objects take the shared path too
    try:
        big = {name: shared[i % len(shared)] for i, name in enumerate(names)}
        doc = {"features": big, "z": other, "a": {"nested": big, "x": [big]}, "n": len(names)}
        for value in (doc, big, other, {1: "int key", "b": 2}):
            try:
                expected = json.dumps(value, separators=(",", ":"), sort_keys=sort_keys)
            except TypeError:  # keys json cannot sort
                continue
            assert json_compact.dumps(value, sort_keys=sort_keys) == expected
    finally:
        json_compact.SHARED_MIN = saved


def test_a_wide_features_object_is_the_same_text():
    specs = [{"dtype": "int64", "shape": []}, {"dtype": "string", "shape": [], "nullable": True, "missing": 3}]
    features = {f"c{i}\u00e9": specs[i % 7 == 0] for i in range(5000)}
    doc = {"format": "x", "features": features, "splits": {"train": {"num_records": 1}}}
    for sort_keys in (False, True):
        assert json_compact.dumps(doc, sort_keys=sort_keys) == json.dumps(doc, separators=(",", ":"), sort_keys=sort_keys)


_SCALARS = st.one_of(st.text(max_size=5), st.integers(), st.booleans(), st.none(), st.floats(allow_nan=False))
_FLAT = st.one_of(st.text(max_size=5), st.integers())


@given(st.lists(st.text(max_size=4), max_size=4, unique=True), st.lists(st.lists(_FLAT, min_size=4, max_size=4),
       max_size=12), st.dictionaries(st.text(max_size=3), _VALUES, max_size=3), _SCALARS, st.booleans(),
       st.sampled_from([1, 2, 4]))
@settings(max_examples=300, deadline=None)
def test_long_lists_of_flat_objects_are_indented_as_json_writes_them(keys, rows, other, odd, sort_keys, indent):
    """Lists of objects of the same keys (a manifest's sources), one holding another value type, one of
    other keys, and the placeholder's own text in a string: all as ``json.dumps(indent=...)``."""
    saved, json_compact.LONG_LIST = json_compact.LONG_LIST, 2
    try:
        items = [dict(zip(keys, row)) for row in rows]
        for value in ([*items, *items], [*items, {**items[0], keys[0]: odd}] if items and keys else [],
                      [*items, {"other": 1}], [{}, {}], items[:1]):
            doc = {"format": "x", "sources": value, "a": other, "b": [value], "\0": "\0" + "0" * 32}
            assert json_compact.indented(doc, indent=indent, sort_keys=sort_keys) == json.dumps(
                doc, indent=indent, sort_keys=sort_keys)
    finally:
        json_compact.LONG_LIST = saved


def test_a_manifests_sources_are_the_same_text():
    sources = [{"uri": f"/in/w{i % 7}/part-{i:06d}.csv\u00e9%s", "num_bytes": i * 31, "num_records": 2,
                "num_rejected": i % 3} for i in range(3000)]
    doc = {"format": "x", "features": {"a": {"dtype": "int64"}}, "sources": sources, "rejected": {"paths": []}}
    for sort_keys in (False, True):
        assert json_compact.indented(doc, indent=2, sort_keys=sort_keys) == json.dumps(doc, indent=2, sort_keys=sort_keys)


def test_a_string_equal_to_the_placeholder_makes_json_write_it_all(monkeypatch):
    monkeypatch.setattr(json_compact.secrets, "token_hex", lambda n: "f" * 2 * n)  # a placeholder known in advance
    sources = [{"uri": str(i), "num_bytes": i} for i in range(json_compact.LONG_LIST)]
    doc = {"sources": sources, "note": "\0" + "f" * 32}
    assert json_compact.indented(doc, indent=2) == json.dumps(doc, indent=2)
