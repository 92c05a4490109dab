"""A TFDS data set as input (``shardprep.formats.tfds``), with the real tensorflow-datasets library: a
data set TFDS wrote with its own API is re-sharded exactly balanced with its splits, features and
class names kept. (Our data sets opened by TFDS: test_tfds_metadata.py.)
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from shardprep import manifest, naming, run
from shardprep.formats import tfds as tfds_input

CLASSES = ["cat", "dog", "bird"]


def reshard(*args) -> int:
    return run.main([str(a) for a in args])


def records(tfds, root, split: str) -> list[dict]:
    builder = tfds.builder_from_directory(str(root))
    return list(tfds.as_numpy(builder.as_dataset(split=split, shuffle_files=False)))


def assert_opens_like_manifest(tfds, root) -> None:
    """TFDS's splits, counts and shard lengths are the manifest's."""
    m = manifest.load(str(root))
    info = tfds.builder_from_directory(str(root)).info
    assert set(info.splits.keys()) == set(m.splits)
    for name, split in m.splits.items():
        assert info.splits[name].num_examples == split.num_records
        assert list(info.splits[name].shard_lengths) == [s.num_records for s in split.shards]
        assert info.splits[name].num_bytes == split.num_bytes


# --- TFDS data sets as input ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def tfds_source(tfds, tmp_path_factory):
    """A data set written by TFDS's own API: an Image, a ClassLabel and Tensors, one file per split."""
    rng = np.random.default_rng(0)
    f = tfds.features
    features = f.FeaturesDict({
        "image": f.Image(shape=(None, None, 3), encoding_format="png"),
        "label": f.ClassLabel(names=CLASSES),
        "vec": f.Tensor(shape=(3,), dtype=np.float32),
        "tokens": f.Tensor(shape=(None,), dtype=np.int64),
        "meta": {"id": f.Scalar(dtype=np.int64)},
        "objects": f.Sequence({"bbox": f.BBoxFeature(), "kind": f.ClassLabel(names=["big", "small"])}),
    })

    def examples(n: int, start: int) -> list:
        return [(i, {"image": rng.integers(0, 255, (3 + i % 4, 5, 3), dtype=np.uint8), "label": i % 3,
                     "vec": np.arange(3, dtype=np.float32) + i, "tokens": np.arange(i % 5, dtype=np.int64),
                     "meta": {"id": i}, "objects": {"bbox": np.full((i % 3, 4), 0.25, np.float32),
                                                    "kind": [k % 2 for k in range(i % 3)]}})
                for i in range(start, start + n)]

    builder = tfds.dataset_builders.store_as_tfds_dataset(
        name="toy", version="1.0.0", features=features, data_dir=str(tmp_path_factory.mktemp("tfds")),
        split_datasets={"train": examples(41, 0), "test": examples(13, 100)})
    return Path(builder.data_dir)


def flat(ex: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in ex.items():
        out.update(flat(v, f"{prefix}{k}/") if isinstance(v, dict) else {prefix + k: v})
    return out


def test_tfds_data_set_is_resharded_exactly_balanced_for_4_workers(tfds, tfds_source, tmp_path):
    out = tmp_path / "ds"
    assert reshard("--format", "tfds", "--input", tfds_source, "--output", out, "--workers", 4) == 0
    m = manifest.load(str(out))
    assert set(m.splits) == {"train", "test"}  # the TFDS splits kept, no --split needed
    for name, n in (("train", 41), ("test", 13)):
        sizes = [s.num_records for s in m.splits[name].shards]
        assert len(sizes) == 4 and sum(sizes) == n and max(sizes) - min(sizes) <= 1
    assert m.features["label"] == {"dtype": "int64", "shape": [], "names": CLASSES}
    assert m.features["image"] == {"dtype": "string", "shape": []}  # still the encoded PNG bytes
    assert m.features["meta/id"] == {"dtype": "int64", "shape": []}
    assert m.features["objects/bbox"] == {"dtype": "float32", "shape": [-1]}  # a Sequence: flat lists
    assert m.features["objects/kind"] == {"dtype": "int64", "shape": [-1], "names": ["big", "small"]}
    assert (out / naming.TFDS_FEATURES).read_text() == (tfds_source / naming.TFDS_FEATURES).read_text()

    assert_opens_like_manifest(tfds, out)
    out_features = tfds.builder_from_directory(str(out)).info.features
    assert out_features["label"].names == CLASSES and out_features["objects"]["kind"].names == ["big", "small"]
    for split in ("train", "test"):
        want = {int(e["meta"]["id"]): flat(e) for e in records(tfds, tfds_source, split)}
        got = {int(e["meta"]["id"]): flat(e) for e in records(tfds, out, split)}
        assert got.keys() == want.keys()
        for key, ex in want.items():
            for name, value in ex.items():
                np.testing.assert_array_equal(got[key][name], value, err_msg=f"{split} {key} {name}")


def test_split_flag_merges_and_resplits_tfds_splits(tfds_source, tmp_path):
    out = tmp_path / "ds"
    assert reshard("--format", "tfds", "--input", tfds_source, "--output", out, "--num-shards", 2,
                   "--split", "a=0.5,b=0.5") == 0
    m = manifest.load(str(out))
    assert set(m.splits) == {"a", "b"} and m.accounting.written == 54


def test_schema_of_tfds_features_and_shard_names_match_tfds(tfds, tfds_source):
    doc = json.loads((tfds_source / naming.TFDS_FEATURES).read_text())
    schema = tfds_input.schema_from_features(doc, lambda name: tuple(CLASSES) if name == "label" else ())
    assert schema["vec"].shape == (3,) and schema["tokens"].shape == (-1,) and schema["label"].names == tuple(CLASSES)
    info = tfds.builder_from_directory(str(tfds_source)).info
    ours = [p for _, p, _ in tfds_input.shard_paths(json.loads((tfds_source / naming.TFDS_INFO).read_text()))]
    theirs = [str(Path(p).relative_to(tfds_source)) for s in ("train", "test")
              for p in info.splits[s].filepaths]
    assert ours == theirs


@pytest.mark.parametrize("setup, message", [
    (lambda d: None, "dataset_info.json is missing"),
    (lambda d: (d / "dataset_info.json").write_text(json.dumps({"fileFormat": "array_record", "splits": []})),
     "only tfrecord"),
])
def test_tfds_input_refusals_are_one_line(tmp_path, capsys, setup, message):
    setup(tmp_path)
    assert reshard("--format", "tfds", "--input", tmp_path, "--output", tmp_path / "out", "--num-shards", 2) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_a_tfds_folder_without_the_format_flag_says_which_flag(tfds_source, tmp_path, capsys):
    assert reshard("--input", tfds_source, "--output", tmp_path / "out", "--num-shards", 2) == 2
    assert "add --format tfds" in capsys.readouterr().err


@pytest.mark.parametrize("leaf, message", [
    ({"sequence": {"feature": {"tensor": {"dtype": "int64", "shape": {"dimensions": ["-1"]}}}, "length": "-1"}},
     "ragged"),
    ({"video": {}}, "not supported"),
    ({"tensor": {"dtype": "complex64", "shape": {}}}, "complex64"),
])
def test_tfds_features_without_a_flat_example_form_are_refused(leaf, message):
    doc = {"featuresDict": {"features": {"f": leaf}}}
    with pytest.raises(tfds_input.InputError, match=message):
        tfds_input.schema_from_features(doc)
