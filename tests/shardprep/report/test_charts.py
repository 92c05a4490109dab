"""``report.charts``: the axis and tooltip labels (issue 57 item 9: "14.5k" was drawn for 145,011) and the charts' escaping."""
from __future__ import annotations

import pytest

from shardprep.report.charts import bar_chart, histogram_chart, short_number


@pytest.mark.parametrize(("value", "label"), [
    (0, "0"), (1, "1"), (7.0, "7"), (999, "999"), (999.4, "999"), (999.6, "1k"),
    (1_000, "1k"), (1_234, "1.23k"), (14_500, "14.5k"), (145_011, "145k"), (999_499, "999k"), (999_999, "1M"),
    (1_000_000, "1M"), (1_234_567, "1.23M"), (1.45e7, "14.5M"), (999_999_999, "1G"), (1e9, "1G"), (2.5e12, "2.5T"),
    (-145_011, "-145k"), (-3, "-3"), (0.5, "0.5"), (0.000123, "0.000123"), (2.71828, "2.72"),
])
def test_short_number_over_magnitudes(value, label):
    assert short_number(value) == label


@pytest.mark.parametrize("value", [float("nan"), float("inf"), True, None, "<b>"])
def test_short_number_of_what_is_not_a_finite_number_is_its_escaped_text(value):
    assert short_number(value) in ("nan", "inf", "True", "None", "&lt;b&gt;")


def test_a_shard_chart_labels_its_axis_with_the_largest_value():
    svg = bar_chart([145_011, 140_002, 139_999], title="records per shard of train")
    assert '>145k</text>' in svg and "14.5k" not in svg


def test_chart_titles_and_labels_are_escaped_for_html_and_bidi_controls():
    svg = bar_chart([1, 2], title="t\u202e<x>", labels=["a\u200b", "<b>"])
    assert "t\\u202e&lt;x&gt;" in svg and "a\\u200b" in svg and "&lt;b&gt;" in svg and "\u202e" not in svg
    svg = histogram_chart([0, 1, 2], [3, 4], title="f\u2066 histogram")
    assert "f\\u2066 histogram" in svg and "\u2066" not in svg
