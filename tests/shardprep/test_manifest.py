"""Manifest round trip, invariants, and refusal of unsafe manifests."""
from __future__ import annotations

import json

import pytest

from shardprep import manifest, naming


def make(**overrides) -> manifest.Manifest:
    shards = tuple(
        manifest.ShardInfo(naming.shard_path("run-20260101T000000Z-00000000", "train", i, 2), n, 10 * n, "0" * 8)
        for i, n in enumerate([3, 2])
    )
    fields = dict(
        features={"x": {"dtype": "float32", "shape": []}},
        splits={"train": manifest.SplitInfo(5, 50, shards)},
        sources=(manifest.SourceInfo("a.csv", 100, 5, 1),),
        rejected=manifest.RejectedInfo(1, ("run-20260101T000000Z-00000000/rejected/rejected-00000-of-00001.jsonl",), {"csv_columns": 1}),
        accounting=manifest.Accounting(6, 5, 1),
        seed=42,
        shuffled=True,
    )
    fields.update(overrides)
    return manifest.Manifest(**fields)


def test_round_trip(tmp_path):
    m = make()
    manifest.write(str(tmp_path), m)
    loaded = manifest.load(str(tmp_path))
    assert loaded.splits == m.splits and loaded.accounting == m.accounting and loaded.rejected == m.rejected
    assert manifest.problems(loaded) == []
    doc = json.loads((tmp_path / "manifest.json").read_text())
    assert {"format", "version", "tool_version", "created", "record_type", "compression", "seed", "shuffled",
            "features", "splits", "sources", "rejected", "accounting"} <= doc.keys()


def test_problems_find_imbalance_and_bad_accounting():
    shards = (manifest.ShardInfo("r/train/train-00000-of-00002.tfrecord", 4, 40, "0"),
              manifest.ShardInfo("r/train/train-00001-of-00002.tfrecord", 1, 10, "0"))
    m = make(splits={"train": manifest.SplitInfo(5, 50, shards)}, accounting=manifest.Accounting(7, 5, 1))
    found = "\n".join(manifest.problems(m))
    assert "unbalanced" in found and "read 7 != written 5 + rejected 1" in found


@pytest.mark.parametrize("path", ["../evil.tfrecord", "/etc/passwd", "gs://other-bucket/x.tfrecord", "a/../../b", "a//b"])
def test_load_refuses_paths_outside_the_folder(tmp_path, path):
    doc = make().to_json()
    doc["splits"]["train"]["shards"][0]["path"] = path
    (tmp_path / "manifest.json").write_text(json.dumps(doc))
    with pytest.raises(manifest.ManifestError, match="not a plain path inside the data set folder"):
        manifest.load(str(tmp_path))


def test_load_refuses_unknown_version_and_missing_manifest(tmp_path):
    with pytest.raises(manifest.ManifestError, match="no manifest at"):
        manifest.load(str(tmp_path))
    doc = make().to_json()
    doc["version"] = 2
    (tmp_path / "manifest.json").write_text(json.dumps(doc))
    with pytest.raises(manifest.ManifestError, match="version 2 is not supported"):
        manifest.load(str(tmp_path))


def _write_inputs(folder) -> dict[str, list[str]]:
    """A CSV (a bad row, a missing value, two splits, statistics) and a text corpus: the manifests' every part."""
    rows = ["id,name,score"] + [f"{i},n{i % 7},{'' if i == 5 else i / 4}" for i in range(60)] + ["x,y,z,too,many"]
    (folder / "t.csv").write_text("\n".join(rows) + "\n")
    words = "the cat sat on a mat river stone music night".split()
    docs = ["\n".join(" ".join(words[(d + k + j) % 10] for j in range(6)) + "." for k in range(4)) for d in range(40)]
    (folder / "t.txt").write_text("\n\n".join(docs) + "\n")
    return {
        "csv": ["--input", str(folder / "t.csv"), "--split", "train=0.8,test=0.2", "--statistics", "on",
                "--max-bad-records", "1", "--num-shards", "2"],
        "text": ["--input", str(folder / "t.txt"), "--task", "bert-pretraining", "--train-vocab", "60",
                 "--max-seq-length", "32", "--num-shards", "2"],
    }


@pytest.mark.parametrize("case", ["csv", "text"])
def test_the_launcher_reads_back_its_commit_unparsed_and_equal(tmp_path, case):
    """The manifest an in-process commit wrote is loaded back as the object it encoded: equal to what
    parsing its bytes gives (else a reader in this process would see another data set than one in
    another process); any other bytes are parsed."""
    from shardprep import run

    out = tmp_path / "out"
    assert run.main([*_write_inputs(tmp_path)[case], "--output", str(out)]) == 0
    raw = (out / naming.MANIFEST).read_bytes()
    loaded = manifest.load(str(out))
    assert loaded is manifest._encoded[1]
    assert loaded == manifest._parsed("manifest.json", raw)
    assert manifest.load(str(out), run_id=next(iter(loaded.run_ids))) is loaded  # the run's copy: the same bytes
    (out / naming.MANIFEST).write_bytes(raw.replace(b'"seed": 42', b'"seed": 43'))
    assert manifest.load(str(out)).seed == 43
