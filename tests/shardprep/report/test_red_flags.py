"""``shardprep.report.red_flags``: what the report flags in a data set's manifest, and why."""
from __future__ import annotations

import re

from shardprep import manifest
from shardprep.report import red_flags as report_flags
from tests.shardprep.report.report_fixtures import manifest_doc as _doc


def test_red_flags_fire_on_constant_high_missing_and_imbalanced_label_only(dataset):
    flags = report_flags.red_flags(manifest.load(str(dataset)))
    text = "\n".join(f"{f.where}: {f.why}" for f in flags)
    assert "feature const in train: constant" in text
    assert re.search(r"feature sparse in train: 6\d\.\d% of records miss it", text)
    assert "feature label in train: label imbalance" in text
    assert not any(f.where.startswith(("feature x ", "feature id ", "feature text ")) for f in flags), text
    assert not any(f.where.startswith("split ") for f in flags), text  # shards of like records: bytes close


def test_shard_bytes_far_apart_are_flagged(dataset):
    doc = _doc(dataset)
    shards = doc["splits"]["train"]["shards"]
    shards[0]["num_bytes"] = shards[1]["num_bytes"] * 2
    doc["splits"]["train"]["num_bytes"] = sum(s["num_bytes"] for s in shards)
    flags = report_flags.red_flags(manifest.Manifest.from_json(doc))
    assert any(f.where == "split train" and re.search(r"max/min (1\.9\d|2\.\d\d) > 1\.1", f.why) for f in flags), flags


def test_a_label_named_by_the_manifest_or_flag_is_checked(dataset):
    doc = _doc(dataset)
    doc["statistics"]["train"]["text"]["top"] = [["a", 500], ["b", 10]]
    doc["statistics"]["train"]["text"]["distinct"] = 2
    m = manifest.Manifest.from_json(doc)
    assert not any(f.where == "feature text in train" for f in report_flags.red_flags(m))
    assert any(f.where == "feature text in train" and "imbalance" in f.why for f in report_flags.red_flags(m, label="text"))


def test_top_values_that_are_bytes_are_shown_by_kind_never_raw():
    from shardprep.report.red_flags import shown_value

    png = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR".decode("utf-8", "backslashreplace")  # as the statistics keep it
    assert shown_value(png) == "<PNG bytes>"
    assert shown_value(b"\xff\xd8\xff\xe0JFIF".decode("utf-8", "backslashreplace")) == "<JPEG bytes>"
    assert shown_value(b"\x00\x01\xfe".decode("utf-8", "backslashreplace")) == "<binary bytes>"
    assert shown_value("Paris") == "Paris" and shown_value("two\nlines") == "two\\nlines"
