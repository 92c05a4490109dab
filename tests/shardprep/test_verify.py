"""Issue 13 items 3 and 9: verify refuses folders that would mislead the trainer, and never hangs.

Each case starts from a sound committed data set (train and eval, real shards) and changes one thing
the way an attacker or a careless copy would; verify must name it, the CLI in one line.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from shardprep import manifest, verify
from shardprep.errors import ManifestError
from tests.commit_fixtures import committed
from tests.conftest import ROOT, run_cli

RUN = "run-20261201T000000Z-0000abcd"


@pytest.fixture
def ds(tmp_path) -> Path:
    out = tmp_path / "ds"
    assert committed(str(out), RUN, records=40).endswith("manifest.json")
    assert verify.verify(str(out))[0] == []
    return out


def _doc(ds: Path) -> dict:
    return json.loads((ds / "manifest.json").read_text())


def _save(ds: Path, doc: dict) -> None:
    (ds / "manifest.json").write_text(json.dumps(doc))


def _problems(ds: Path, **kwargs) -> str:
    problems = verify.verify(str(ds), **kwargs)[0]
    assert problems, "verify passed a misleading folder"
    return "\n".join(problems)


def test_a_shard_linked_to_a_file_outside_is_refused(ds, tmp_path) -> None:
    shard = ds / _doc(ds)["splits"]["train"]["shards"][0]["path"]
    outside = tmp_path / "elsewhere.tfrecord"
    shutil.copy(shard, outside)  # same bytes: size and crc32c agree, only the link tells
    shard.unlink()
    shard.symlink_to(outside)
    assert "outside the data set folder" in _problems(ds)


def test_a_run_folder_linked_outside_is_refused(ds, tmp_path) -> None:
    shutil.move(ds / RUN, tmp_path / "moved")
    (ds / RUN).symlink_to(tmp_path / "moved")
    found = _problems(ds)
    assert "run folder is a symlink" in found and "outside the data set folder" in found


def test_a_shard_listed_twice_is_refused(ds) -> None:
    doc = _doc(ds)
    shards = doc["splits"]["train"]["shards"]
    shards[1] = dict(shards[0])
    total = sum(s["num_bytes"] for s in shards)
    doc["splits"]["train"]["num_bytes"] = total
    _save(ds, doc)
    assert "is listed twice (train[0] and train[1])" in _problems(ds)


@pytest.mark.parametrize("how", ["same paths", "copied files"])
def test_eval_made_of_trains_shards_is_refused(ds, how) -> None:
    doc = _doc(ds)
    train, ev = doc["splits"]["train"], doc["splits"]["eval"]
    for i, shard in enumerate(ev["shards"]):
        src = train["shards"][i]
        if how == "copied files":
            shutil.copy(ds / src["path"], ds / shard["path"])
            shard.update({k: src[k] for k in ("num_records", "num_bytes", "crc32c")})
        else:
            shard.update(src)
    ev["num_bytes"] = train["num_bytes"]
    _save(ds, doc)
    found = _problems(ds)
    assert ("listed twice" if how == "same paths" else "same crc32c, size and records as") in found, found


@pytest.mark.parametrize("features, says", [
    ({"x": {"dtype": "float32", "shape": []}, "y": {"dtype": "float32", "shape": [2]}}, "'x' holds int64, the manifest says float32"),
    ({"x": {"dtype": "int64", "shape": []}, "y": {"dtype": "float32", "shape": [3]}}, "'y' holds 2 values"),
    ({"x": {"dtype": "int64", "shape": []}, "z": {"dtype": "float32", "shape": [2]}}, "'z' is missing"),
    ({"x": {"dtype": "int64", "shape": []}}, "'y' is not in the manifest"),
])
def test_features_the_records_do_not_have_are_refused(ds, features, says) -> None:
    doc = _doc(ds)
    doc["features"] = features
    _save(ds, doc)
    assert says in _problems(ds)
    assert says in _problems(ds, deep=True)


def test_deep_decodes_every_record(ds) -> None:
    """A record past the default sample that does not fit the features: only --deep sees it."""
    from shardprep import framing, writer
    from shardprep.example import example_encoder
    from shardprep.schema import FeatureSpec

    doc = _doc(ds)
    shard = doc["splits"]["train"]["shards"][0]
    good = example_encoder({"x": FeatureSpec("int64", ()), "y": FeatureSpec("float32", (2,))})
    bad = example_encoder({"x": FeatureSpec("string", ()), "y": FeatureSpec("float32", (2,))})
    records = [good({"x": i, "y": [0.0, 1.0]}) for i in range(shard["num_records"] - 1)] + [bad({"x": "s", "y": [0.0, 1.0]})]
    info = writer.write_shard(str(ds), shard["path"], framing.frame_all(records), len(records), compress=False)
    doc["splits"]["train"]["num_bytes"] += info.num_bytes - shard["num_bytes"]
    shard.update(num_bytes=info.num_bytes, crc32c=info.crc32c)
    _save(ds, doc)
    assert verify.verify(str(ds))[0] == []
    assert "'x' holds string, the manifest says int64" in _problems(ds, deep=True)


@pytest.mark.parametrize("features", [{"x": "float32"}, {"x": {"dtype": "complex128", "shape": []}}, {},
                                      {"x": {"dtype": "int64", "shape": [True]}}, []])
def test_malformed_feature_specs_are_refused(ds, features) -> None:
    doc = _doc(ds)
    doc["features"] = features
    _save(ds, doc)
    with pytest.raises(ManifestError, match="manifest features"):
        manifest.load(str(ds))


@pytest.mark.parametrize("value", [True, 9022.9, " 9022 ", -1, None, 2**70 * 1.0])
@pytest.mark.parametrize("where", ["split", "shard", "accounting", "rejected"])
def test_counts_that_are_not_non_negative_integers_are_refused(ds, value, where) -> None:
    doc = _doc(ds)
    target = {"split": doc["splits"]["train"], "shard": doc["splits"]["train"]["shards"][0],
              "accounting": doc["accounting"], "rejected": doc["rejected"]}[where]
    target["num_records" if where != "accounting" else "read"] = value
    _save(ds, doc)
    with pytest.raises(ManifestError, match="expected a non-negative integer"):
        manifest.load(str(ds))


@pytest.mark.parametrize("text", ['{"format": "shardprep.manifest", "version": 1, "splits": []}',
                                  '{"format": "shardprep.manifest", "version": 1}', "[" * 100_000, "null"])
def test_malformed_manifests_give_one_line_never_a_traceback(ds, text) -> None:
    (ds / "manifest.json").write_text(text)
    for tool in ("shardprep.verify", "shardprep.inspect"):
        proc = run_cli(tool, ds)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert proc.stderr.strip().count("\n") == 0 and "manifest" in proc.stderr, proc.stderr


def _hostile(ds: Path, kind: str) -> str:
    shard = ds / _doc(ds)["splits"]["train"]["shards"][0]["path"]
    shard.unlink()
    if kind == "fifo":
        os.mkfifo(shard)
    else:
        shard.symlink_to("/dev/zero")
    return str(shard.relative_to(ds))


@pytest.mark.parametrize("kind", ["fifo", "dev_zero"])
def test_a_fifo_or_dev_zero_shard_never_hangs_verify_or_inspect(ds, kind) -> None:
    path = _hostile(ds, kind)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for tool in ("shardprep.verify", "shardprep.inspect"):
        proc = subprocess.run([sys.executable, "-m", tool, str(ds)], capture_output=True, text=True, env=env, timeout=60)
        output = proc.stdout + proc.stderr
        assert proc.returncode != 0 and path in output and "Traceback" not in output, output
        assert ("a FIFO, not a regular file" if kind == "fifo" else "outside the data set folder") in output, output
