"""A second reader of our shards: ``tfrecord_lite`` (the ``tfrecord-lite`` package, C, no TensorFlow,
written by others) reads a data set that ``shardprep.verify`` passes, and finds in every shard the
records the manifest counts, holding the features shardprep's own reader decodes (framing's
CRC-checked reading and ``example.decode_example``). A fault shared by shardprep's writer and
reader (a framing or an Example encoding that only they agree on) would pass ``verify`` and fail here.
"""
from __future__ import annotations

import os

import numpy as np
import pytest
import tfrecord_lite

from shardprep import example, framing, manifest, run, verify
from trainer.demo_images import write_images


def _lite(value: object) -> list:
    """A ``tfrecord_lite`` feature (an int64 or float32 array, or a list of bytes) as a list."""
    return value.tolist() if isinstance(value, np.ndarray) else list(value)


def _own(values: list) -> list:
    """A feature as ``example.decode_example`` gives it, floats rounded to float32 as stored."""
    return [float(np.float32(v)) if isinstance(v, float) else v for v in values]


def _both_readers(root: str) -> int:
    """Compares the two readers on every shard of the data set at ``root``; returns the records read."""
    m = manifest.load(root)
    assert m.compression == "none", m.compression  # tfrecord_lite reads uncompressed files
    total = 0
    for split in m.splits.values():
        for shard in split.shards:
            path = os.path.join(root, shard.path)
            lite = list(tfrecord_lite.tf_record_iterator(path))
            with open(path, "rb") as f:
                own = [example.decode_example(record) for record in framing.read_records(f)]
            assert len(lite) == len(own) == shard.num_records, shard.path
            for i, (a, b) in enumerate(zip(lite, own)):
                assert {k: _lite(v) for k, v in a.items()} == {k: _own(v) for k, v in b.items()}, (shard.path, i)
            total += len(lite)
    return total


@pytest.mark.slow
def test_tfrecord_lite_reads_a_verified_tabular_data_set_as_shardprep_does(tmp_path):
    src = tmp_path / "in.csv"
    rows = [f'{i},{i * 0.37 - 20:.3f},"w{i % 7}, é",{"" if i % 5 == 0 else i % 3}\n' for i in range(300)]
    src.write_text("id,score,name,label\n" + "".join(rows), encoding="utf-8")
    root = str(tmp_path / "ds")
    assert run.main(["--input", str(src), "--output", root, "--num-shards", "3", "--split", "train=0.8,eval=0.2"]) == 0
    assert verify.verify(root)[0] == []
    assert _both_readers(root) == 300


@pytest.mark.slow
def test_tfrecord_lite_reads_a_verified_image_data_set_as_shardprep_does(tmp_path):
    raw = tmp_path / "raw"
    paths = write_images(str(raw), per_class=6)
    root = str(tmp_path / "ds")
    assert run.main(["--input", str(raw), "--format", "images", "--output", root, "--num-shards", "2"]) == 0
    assert verify.verify(root)[0] == []
    assert _both_readers(root) == len(paths)
