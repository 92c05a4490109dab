"""TFDS interop with the real tensorflow-datasets library, both ways.

Our data sets open with ``tfds.builder_from_directory`` (metadata written without TFDS, checked
against what TFDS writes itself), and a data set TFDS wrote with its own API is re-sharded exactly
balanced with its splits, features and class names kept.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from shardprep import manifest, naming, run, tfds_metadata
from shardprep.example import example_encoder
from shardprep.formats import tfds as tfds_input
from shardprep.framing import frame
from shardprep.schema import schema_from_json
from tests.conftest import sample_rows, write_csv

CLASSES = ["cat", "dog", "bird"]


@pytest.fixture(scope="module")
def tfds():
    """The library, imported once for the module (its import takes seconds); in the dev extra, so a
    missing install fails here rather than skipping the proof."""
    import tensorflow_datasets

    return tensorflow_datasets


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


# --- our output in TFDS --------------------------------------------------------------------------


def test_features_json_is_what_tfds_writes_for_the_same_features(tfds, tmp_path):
    features = {
        "image/encoded": {"dtype": "string", "shape": []},
        "image/class/label": {"dtype": "int64", "shape": [], "names": CLASSES},
        "image/height": {"dtype": "int64", "shape": []},
        "x": {"dtype": "float32", "shape": [3]},
        "ids": {"dtype": "int64", "shape": [-1]},
        "text": {"dtype": "string", "shape": []},
        "words": {"dtype": "string", "shape": [-1]},
    }
    f = tfds.features
    theirs = f.FeaturesDict({
        "image": {"encoded": f.Image(shape=(None, None, 3)), "class": {"label": f.ClassLabel(names=CLASSES)},
                  "height": f.Tensor(shape=(), dtype=np.int64)},
        "x": f.Tensor(shape=(3,), dtype=np.float32),
        "ids": f.Tensor(shape=(None,), dtype=np.int64),
        "text": f.Tensor(shape=(), dtype=np.str_),
        "words": f.Tensor(shape=(None,), dtype=np.str_),
    })
    theirs.save_config(str(tmp_path))  # features.json and the class names file, as TFDS writes them
    assert json.dumps(tfds_metadata.features_json(features), indent=4, sort_keys=True) == \
        (tmp_path / naming.TFDS_FEATURES).read_text()
    assert tfds_metadata.label_files(features) == {p.name: p.read_text() for p in tmp_path.glob("*.labels.txt")}


def test_features_that_clash_as_nested_names_are_refused():
    with pytest.raises(tfds_metadata.Untranslatable, match="below another feature"):
        tfds_metadata.features_json({"a": {"dtype": "int64", "shape": []}, "a/b": {"dtype": "int64", "shape": []}})


@pytest.fixture(scope="module")
def csv_ds(tmp_path_factory):
    raw = tmp_path_factory.mktemp("raw")
    write_csv(raw / "a.csv", sample_rows(203))
    out = tmp_path_factory.mktemp("csv") / "My-Data"
    assert reshard("--input", raw / "a.csv", "--output", out, "--workers", 4, "--split", "train=0.8,eval=0.2") == 0
    return out


def test_csv_data_set_opens_in_tfds_with_every_record(tfds, csv_ds):
    assert_opens_like_manifest(tfds, csv_ds)
    info = json.loads((csv_ds / naming.TFDS_INFO).read_text())
    assert info["name"] == "my_data"
    rows = {r["id"]: r for r in sample_rows(203)}
    seen = []
    for split in ("train", "eval"):
        for ex in records(tfds, csv_ds, split):
            row = rows[int(ex["id"])]
            assert ex["id"].dtype == np.int64 and ex["x0"].dtype == np.float32
            assert ex["text"].decode() == row["text"] and ex["label"] == row["label"]
            assert ex["x1"] == np.float32(row["x1"])
            seen.append(int(ex["id"]))
    assert sorted(seen) == sorted(rows)


def test_metadata_follows_the_committed_run_and_gzip_gets_none(tfds, csv_ds, tmp_path, capsys):
    out = tmp_path / "ds"
    raw = csv_ds.parent.parent / "again.csv"
    write_csv(raw, sample_rows(50, start=1000))
    assert reshard("--input", raw, "--output", out, "--num-shards", 2) == 0
    first = manifest.load(str(out)).run_ids
    assert reshard("--input", raw, "--output", out, "--num-shards", 5, "--overwrite") == 0  # the first run is kept
    m = manifest.load(str(out))
    assert first <= {p.name for p in out.iterdir()} and m.run_ids != first
    assert_opens_like_manifest(tfds, out)
    assert len(records(tfds, out, "train")) == 50
    capsys.readouterr()
    assert reshard("--input", raw, "--output", out, "--num-shards", 2, "--overwrite", "--compression", "gzip") == 0
    assert not (out / naming.TFDS_INFO).exists() and not (out / naming.TFDS_FEATURES).exists()
    assert "TFDS reads only uncompressed" in capsys.readouterr().err  # the log line says why


def test_image_fields_decode_as_tfds_images_with_class_names(tfds, tmp_path):
    import tensorflow as tf

    rng = np.random.default_rng(1)
    pixels = [rng.integers(0, 255, (4 + i % 3, 5, 3), dtype=np.uint8) for i in range(12)]
    schema_doc = {"image/encoded": {"dtype": "string", "shape": []},
                  "image/class/label": {"dtype": "int64", "shape": [], "names": CLASSES}}
    encode = example_encoder(schema_from_json(schema_doc))
    src = tmp_path / "images.tfrecord"
    src.write_bytes(b"".join(frame(encode({"image/encoded": tf.io.encode_png(p).numpy(), "image/class/label": i % 3}))
                             for i, p in enumerate(pixels)))
    (tmp_path / "schema.json").write_text(json.dumps(schema_doc))
    out = tmp_path / "ds"
    assert reshard("--input", src, "--output", out, "--num-shards", 4, "--schema", tmp_path / "schema.json") == 0
    assert_opens_like_manifest(tfds, out)
    builder = tfds.builder_from_directory(str(out))
    assert builder.info.features["image"]["class"]["label"].names == CLASSES
    got = sorted((tuple(ex["image"]["encoded"].shape), ex["image"]["encoded"].tobytes(), int(ex["image"]["class"]["label"]))
                 for ex in records(tfds, out, "train"))
    assert got == sorted((p.shape, p.tobytes(), i % 3) for i, p in enumerate(pixels))


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


def test_a_data_set_with_missing_values_opens_in_tfds(tfds, tmp_path, capsys):
    """Issue 34: TFDS refused a nullable feature ('Feature: sex (data type: string) is required but could not be
    found'). Nullable features are declared variable-length: [] where missing, [value] where present."""
    rows = [{"id": i, "sex": "" if i % 5 == 0 else "MF"[i % 2], "mass": "" if i % 7 == 0 else f"{i}.5",
             "label": i % 3} for i in range(40)]
    write_csv(tmp_path / "in.csv", rows)
    out = tmp_path / "ds"
    assert reshard("--input", tmp_path / "in.csv", "--output", out, "--workers", "2", "--split", "train=0.75,eval=0.25") == 0
    m = manifest.load(str(out))
    assert m.features["sex"].get("nullable") and m.features["mass"].get("nullable")
    assert "mass, sex may be missing in a record, so TFDS reads them as variable-length" in capsys.readouterr().err
    assert_opens_like_manifest(tfds, out)
    seen = {}
    for split in ("train", "eval"):
        for ex in records(tfds, out, split):
            seen[int(ex["id"])] = ex
    assert sorted(seen) == list(range(40))
    for i, ex in seen.items():
        assert ex["sex"].tolist() == ([] if i % 5 == 0 else ["MF"[i % 2].encode()])
        assert ex["mass"].tolist() == ([] if i % 7 == 0 else [np.float32(f"{i}.5")])
        assert ex["label"] == i % 3 and ex["id"].shape == ()
