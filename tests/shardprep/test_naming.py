from __future__ import annotations

import pytest

from shardprep import naming


def test_shard_paths_format_and_parse():
    path = naming.shard_path("run-20260101T000000Z-0a0b0c0d", "train", 3, 64, gzip=True)
    assert path == "run-20260101T000000Z-0a0b0c0d/train/train-00003-of-00064.tfrecord.gz"
    assert naming.parse_shard_name(path) == naming.ShardName("train", 3, 64, "tfrecord", True)
    assert naming.split_of(path) == "train"
    assert naming.parse_shard_name(naming.rejected_path("run-x", 0, 1)).prefix == "rejected"


@pytest.mark.parametrize("bad", ["train-3-of-64.tfrecord", "train-00064-of-00064.tfrecord", "x.tfrecord"])
def test_parse_refuses(bad):
    with pytest.raises(ValueError):
        naming.parse_shard_name(bad)


def test_run_ids():
    rid = naming.new_run_id()
    assert naming.is_run_id(rid) and not naming.is_run_id("train")


def test_every_template_parses_what_it_formats():
    for kind, template in naming.SPILL_FILES.items():
        fields = {name: 7 * i + 3 for i, name in enumerate(("split", "file", "unit", "part")) if "{" + name in template.pattern}
        name = template.format(**fields)
        assert template.parse(name) == {k: str(v) for k, v in fields.items()}, kind
        assert naming.spill_path("run-x", kind, **fields) == f"{naming.spill_folder('run-x')}/{name}"
        assert template.parse("x" + name) is None
    for gzip in (False, True):
        path = naming.shard_path("run-20261204T000000Z-00000000", "train", 3, 100_000, gzip=gzip)
        assert naming.parse_shard_name(path) == naming.ShardName("train", 3, 100_000, "tfrecord", gzip)
