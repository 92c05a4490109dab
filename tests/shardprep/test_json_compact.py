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
