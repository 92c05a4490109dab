"""The features and the small caps shared by the statistics' tests (``tests/shardprep/stats``)."""
from __future__ import annotations

import contextlib

import pytest

from shardprep.schema import FeatureSpec
from shardprep.stats import feature_stats, sketches

FEATURES = {"x": FeatureSpec("float32"), "n": FeatureSpec("int64"), "c": FeatureSpec("string"),
            "v": FeatureSpec("float32", (-1,)), "w": FeatureSpec("string", (-1,))}


@contextlib.contextmanager
def small_caps():
    """Caps small enough that a few hundred rows pass them: exact counts give way to sketches."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(feature_stats, "MAX_DISTINCT", 150)
        mp.setattr(feature_stats, "MAX_LENGTHS", 12)
        mp.setattr(sketches, "MAX_BUCKETS", 64)
        yield
