"""``shardprep.stats.number_sums``: many features' counts, extremes and exact sums at once are a
Python int per value's, for int64 from its extremes and float32 from its subnormals to its largest."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from shardprep.stats import number_sums
from shardprep.stats.feature_stats import FeatureStats


def _ints(rng: np.random.Generator, n: int) -> np.ndarray:
    kind = rng.integers(0, 3)
    if kind == 0:
        return rng.integers(-99, 99, n, dtype=np.int64)
    if kind == 1:
        return rng.integers(-(1 << 63), (1 << 63) - 1, n, dtype=np.int64, endpoint=True)
    return rng.choice(np.array([0, -1, 1, -(1 << 63), (1 << 63) - 1, 1 << 40], np.int64), n)


def _floats(rng: np.random.Generator, n: int) -> np.ndarray:
    f32 = np.finfo(np.float32)
    pool = np.array([f32.max, -f32.max, f32.tiny, 1.4e-45, -1.4e-45, 0.0, -0.0, 1.0, -1.0], np.float32)
    values = rng.standard_normal(n) * 10.0 ** rng.integers(-45, 38, n)
    return np.where(rng.random(n) < 0.2, rng.choice(pool, n), np.clip(values, -f32.max, f32.max)).astype(np.float32)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), features=st.integers(1, 6))
def test_many_features_at_once_give_each_ones_exact_sums(seed, features):
    rng = np.random.default_rng(seed)
    ints = [(FeatureStats(), _ints(rng, int(rng.integers(0, 300)))) for _ in range(features)]
    floats = [(FeatureStats(), _floats(rng, int(rng.integers(0, 300)))) for _ in range(features)]
    number_sums.int_sums(ints)
    number_sums.float_sums(floats)
    for s, x in ints:
        values = x.tolist()
        assert s.values == len(values)
        assert (s.total, s.squares) == (sum(values), sum(v * v for v in values))
        assert (s.minimum, s.maximum) == ((min(values), max(values)) if values else (None, None))
    for s, x in floats:
        values = x.astype(np.float64).tolist()
        assert s.values == len(values)
        assert s.total == sum(int(v * 2.0**149) for v in values)  # a float32 times 2**149: an integer
        assert s.squares == sum(int(v * v * 2.0**298) for v in values)
        if values:
            assert (s.minimum, s.maximum) == (min(values) + 0.0, max(values) + 0.0)
