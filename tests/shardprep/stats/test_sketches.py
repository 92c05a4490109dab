"""``shardprep.stats.sketches``: exact integer counts and their merge, the number sketch's quantiles within
1% of numpy's, and the compiled buckets the same as the table's."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from shardprep import native
from shardprep.stats import feature_stats, sketches
from shardprep.stats.sketches import Counts


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


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), integers=st.booleans())
def test_compiled_buckets_are_the_tables_on_and_beside_its_bounds(seed, integers):
    """``native.sum_numbers`` puts each value in the bucket ``LogSketch.of`` (a ``searchsorted`` in the
    table) gives it, for values on a bound, one step either side of it, and either sign."""
    from shardprep.stats.columns import _summed_of
    from shardprep.stats.sketches import BUCKET_TABLE, LogSketch

    rng = np.random.default_rng(seed)
    if integers:  # every bound up to 2**63, rounded: the integers next to it
        bounds = BUCKET_TABLE.bounds[(BUCKET_TABLE.bounds >= 1) & (BUCKET_TABLE.bounds < 2.0**62)]
        near = np.floor(rng.choice(bounds, 2000)).astype(np.int64)
        x = (near[:, None] + np.array([-1, 0, 1])).ravel() * rng.choice([-1, 1], 6000)
        kind = 2
    else:  # float32 bounds (subnormals to the largest) and their float32 neighbours
        bounds = BUCKET_TABLE.bounds[(BUCKET_TABLE.bounds > 1e-45) & (BUCKET_TABLE.bounds < 3.4e38)]
        b = rng.choice(bounds, 2000).astype(np.float32)
        x = np.concatenate([b, np.nextafter(b, np.float32(0)), np.nextafter(b, np.float32(np.inf))])
        x = x * rng.choice(np.array([-1, 1], np.float32), x.size)
        x = x[np.isfinite(x)]
        kind = 1
    got = _summed_of(native.sum_numbers(np.ascontiguousarray(x), kind, *BUCKET_TABLE)).sketch()
    want = LogSketch.of(x.astype(np.float64))
    assert (got.zeros, got.positive, got.negative) == (want.zeros, want.positive, want.negative)


QS = list(feature_stats.QUANTILES.values())


def _bound(sorted_x: np.ndarray, q: float) -> float:
    """numpy's linear percentile interpolates x[lo] and x[hi]: each estimated within 1%, so is it."""
    rank = q * (sorted_x.size - 1)
    lo, hi = int(np.floor(rank)), int(np.ceil(rank))
    f = rank - lo
    return sketches.ALPHA * ((1 - f) * abs(sorted_x[lo]) + f * abs(sorted_x[hi])) * (1 + 1e-9) + 1e-300


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 3000), kind=st.sampled_from(["normal", "lognormal", "uniform",
                                                                                      "ints", "mixed"]))
def test_quantiles_are_within_one_percent_of_numpys(seed, n, kind):
    rng = np.random.default_rng(seed)
    x = {"normal": lambda: rng.normal(rng.uniform(-100, 100), rng.uniform(0.1, 1e3), n),
         "lognormal": lambda: rng.lognormal(0, 5, n) * rng.choice([-1, 1]),
         "uniform": lambda: rng.uniform(-1e4, 1e4, n),
         "ints": lambda: rng.integers(-50, 50, n).astype(np.float64),
         "mixed": lambda: np.concatenate([np.zeros(n // 3), rng.normal(0, 1e-3, n - n // 3)])}[kind]()
    x = x.astype(np.float32).astype(np.float64)
    sketch = sketches.LogSketch.of(x)
    got = sketch.quantiles(QS, float(x.min()), float(x.max()))
    ordered = np.sort(x)
    for q, value in zip(QS, got):
        want = np.percentile(x, 100 * q)
        assert abs(value - want) <= _bound(ordered, q), (q, value, want)
    assert sketch.zeros == int(np.count_nonzero(x == 0)) and sketch.count == n
