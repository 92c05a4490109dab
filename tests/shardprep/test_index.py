"""Issue 55 items 1-2: every shard's record index, written with the shard; ``python -m
shardprep.index`` for data sets without one; DALI's ``tfrecord2idx`` text index."""
from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

from shardprep import manifest, naming, reader, record_index, verify
from tests.conftest import run_cli, sample_rows, write_csv


def tfrecord2idx(shard: Path) -> str:
    """The oracle: DALI's tools/tfrecord2idx, its loop as DALI ships it (read with a file position)."""
    lines = []
    with open(shard, "rb") as f:
        while True:
            current = f.tell()
            byte_len = f.read(8)
            if len(byte_len) == 0:
                break
            f.read(4)
            proto_len = struct.unpack("q", byte_len)[0]
            f.read(proto_len)
            f.read(4)
            lines.append(str(current) + " " + str(f.tell() - current) + "\n")
    return "".join(lines)


def _reshard(tmp: Path, *args: str) -> Path:
    src = write_csv(tmp / "in.csv", sample_rows(900))
    out = tmp / "ds"
    run_cli("shardprep.run", "--input", src, "--output", out, "--num-shards", "2", "--split", "train=0.7,eval=0.3",
            *args, check=True)
    return out


@pytest.fixture(scope="module")
def ds(tmp_path_factory) -> Path:
    return _reshard(tmp_path_factory.mktemp("index"))


def _shards(root: Path) -> list[manifest.ShardInfo]:
    return [s for split in manifest.load(str(root)).splits.values() for s in split.shards]


def _strip_indexes(root: Path) -> None:
    """An older run: no index in the manifest nor beside the shards."""
    doc = json.loads((root / naming.MANIFEST).read_text())
    for split in doc["splits"].values():
        for shard in split["shards"]:
            (root / shard.pop("index")["path"]).unlink()
    (root / naming.MANIFEST).write_text(json.dumps(doc, indent=2))


def test_every_shard_has_an_index_in_the_manifest_that_matches_it(ds) -> None:
    for shard in _shards(ds):
        assert shard.index is not None and shard.index.path == naming.index_path(shard.path)
        data = (ds / shard.index.path).read_bytes()
        assert len(data) == shard.index.num_bytes == 16 + 8 * (shard.num_records + 1)
        assert record_index.crc32c_hex(data) == shard.index.crc32c
        with open(ds / shard.path, "rb") as f:
            assert np.array_equal(record_index.decode(data), record_index.scan(f))
    assert not list(ds.glob("*/*/*.tfrecord.*")), "an index never looks like a shard to a glob"
    assert verify.verify(str(ds))[0] == []


def test_the_dali_index_is_what_tfrecord2idx_writes(ds, tmp_path) -> None:
    proc = run_cli("shardprep.index", ds, "--dali", tmp_path / "dali", check=True)
    assert "0 shard(s) indexed now" in proc.stdout
    for shard in _shards(ds):
        assert (tmp_path / "dali" / naming.dali_index_path(shard.path)).read_text() == tfrecord2idx(ds / shard.path)


def test_an_older_data_set_gets_indexes_without_disturbing_a_live_reader(ds, tmp_path) -> None:
    old = tmp_path / "old"
    shutil.copytree(ds, old)
    _strip_indexes(old)
    shards_before = {s.path: (old / s.path).read_bytes() for s in _shards(old)}
    live = reader.open(str(old), "train")  # offsets by a scan: no index yet
    first = live[: len(live)]
    proc = run_cli("shardprep.index", old, check=True)
    assert "4 shard(s) indexed now, 0 already indexed" in proc.stdout, proc.stdout
    assert [s.index.path for s in _shards(old)] == [s.index.path for s in _shards(ds)]
    for s in _shards(old):
        assert (old / s.index.path).read_bytes() == (ds / s.index.path).read_bytes()
        assert (old / s.path).read_bytes() == shards_before[s.path]  # shards untouched
    assert live[: len(live)] == first == reader.open(str(old), "train")[:]
    (run_id,) = manifest.load(str(old)).run_ids
    assert manifest.load(str(old), run_id=run_id).splits == manifest.load(str(old)).splits
    assert verify.verify(str(old))[0] == []
    assert "0 shard(s) indexed now, 4 already indexed" in run_cli("shardprep.index", old, check=True).stdout


def test_verify_names_an_index_that_does_not_describe_its_shard(ds, tmp_path) -> None:
    bad = tmp_path / "bad"
    shutil.copytree(ds, bad)
    shard = _shards(bad)[1]
    offsets = record_index.decode((bad / shard.index.path).read_bytes()).copy()
    offsets[3] += 1  # still starts at 0, ends at the size: only the shard can tell
    data = record_index.encode(offsets)
    (bad / shard.index.path).write_bytes(data)
    doc = json.loads((bad / naming.MANIFEST).read_text())
    for split in doc["splits"].values():
        for entry in split["shards"]:
            if entry["path"] == shard.path:
                entry["index"]["crc32c"] = record_index.crc32c_hex(data)
    (bad / naming.MANIFEST).write_text(json.dumps(doc))
    problems = verify.verify(str(bad))[0]
    assert len(problems) == 1 and shard.path in problems[0] and "damaged" in problems[0], problems
    (bad / shard.index.path).write_bytes(data[:-1] + b"\1")
    problems = verify.verify(str(bad))[0]
    assert problems == [f"{shard.index.path}: the record index does not match the manifest's size and crc32c "
                        "(it was changed or damaged)"]


def test_gzip_shards_have_no_index_and_say_they_cannot_be_read_at_random(tmp_path) -> None:
    out = _reshard(tmp_path, "--compression", "gzip")
    assert all(s.index is None for s in _shards(out)) and not list(out.glob("*/*/*.index"))
    proc = run_cli("shardprep.index", out)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "gzip-compressed and cannot be read at random" in proc.stderr
    with pytest.raises(reader.NotRandomAccessError, match="cannot be read at random"):
        reader.open(str(out), "train")
