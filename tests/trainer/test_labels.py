"""``trainer.labels``: another data set's class ids are matched to the model's by name, never by position."""
from __future__ import annotations

import pytest

from shardprep.schema import FeatureSpec
from trainer.labels import LabelError, class_names, map_by_name

MODEL = ("circle", "square", "stripes")


def test_the_same_names_need_no_mapping() -> None:
    assert map_by_name(MODEL, MODEL, where="ds") is None
    assert map_by_name(MODEL, ("circle", "square"), where="ds") is None  # a prefix: the same ids
    assert map_by_name((), (), where="ds") is None  # plain class ids on both sides


def test_a_subset_maps_by_name() -> None:
    assert map_by_name(MODEL, ("square", "stripes"), where="ds") == (1, 2)
    assert map_by_name(MODEL, ("stripes", "circle"), where="ds") == (2, 0)


@pytest.mark.parametrize("model,data,says", [
    (MODEL, ("square", "triangle"), "'triangle' not among the model's"),
    (MODEL, (), "has no class names"),
    ((), ("a", "b"), "trained on ids without names"),
])
def test_names_that_differ_are_refused(model, data, says) -> None:
    with pytest.raises(LabelError, match=says):
        map_by_name(model, data, where="the data set at ds")


def test_class_names_of_a_data_set() -> None:
    assert class_names(FeatureSpec("int64", (), ("a", "b")), None, "y") == ("a", "b")
    assert class_names(FeatureSpec("int64", (1,)), {"labels": ["x", "y"]}, "label_ids") == ("x", "y")
    assert class_names(FeatureSpec("int64"), None, "y") == ()
