"""Our data sets open in the real tensorflow-datasets library (``shardprep.tfds_metadata``): the
metadata written without TFDS is what TFDS writes for the same features, follows the committed run
(none for gzip shards), and decodes images with their class names and missing values as
variable-length features. (A TFDS data set as input: formats/test_tfds.py.)"""
from __future__ import annotations

import json

import numpy as np
import pytest

from shardprep import manifest, naming, tfds_metadata
from shardprep.example import example_encoder
from shardprep.framing import frame
from shardprep.schema import schema_from_json
from tests.conftest import sample_rows, write_csv
from tests.shardprep.formats.test_tfds import CLASSES, assert_opens_like_manifest, records, reshard


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
