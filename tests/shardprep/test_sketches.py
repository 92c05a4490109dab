"""``shardprep.sketches``: exact integer counts and their merge."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from shardprep.sketches import Counts


def _counts(keys: list[int], rng: np.random.Generator) -> Counts:
    unique = np.unique(np.array(keys, np.int64))
    return Counts(unique, rng.integers(1, 9, unique.size))


@settings(max_examples=200, deadline=None)
@given(a=st.lists(st.integers(-(1 << 62), 1 << 62)), b=st.lists(st.integers(-(1 << 62), 1 << 62)),
       near=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_merge_adds_the_counts_of_the_union_of_keys(a, b, near, seed):
    """Dense (keys close together: a sketch's buckets) or sparse: the union's keys, ascending, each
    with the sum of its counts on both sides."""
    rng = np.random.default_rng(seed)
    if near:  # within a small span: the dense path
        a, b = [k % 300 - 150 for k in a], [k % 300 - 150 for k in b]
    x, y = _counts(a, rng), _counts(b, rng)
    merged = x.merge(y)
    expected: dict[int, int] = {}
    for side in (x, y):
        for key, count in zip(side.keys.tolist(), side.counts.tolist()):
            expected[key] = expected.get(key, 0) + count
    assert merged.keys.tolist() == sorted(expected)
    assert merged.counts.tolist() == [expected[k] for k in sorted(expected)]
    assert merged.keys.dtype == np.int64 and merged.counts.dtype == np.int64
    assert merged == y.merge(x)
