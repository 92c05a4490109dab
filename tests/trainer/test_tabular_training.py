"""Tabular data trains well out of the box (issue 14): mixed scales, a string label, categorical
columns, ``NA`` values and a regression target, through ``shardprep.run --statistics`` and
``trainer.train --model mlp`` with default preprocessing, against a model standardised by hand."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from shardprep import manifest, naming

CLASSES = ("high", "low", "mid")
COLOURS, SIZES = ("blue", "green", "red"), ("L", "M", "S", "XL")
SCALES = (1e-3, 0.5, 30.0, 1e4)


def _write_csv(path: Path, n: int, seed: int = 0) -> None:
    """Numbers on scales 1e-3..1e4 (5% NA), two categorical columns, a 3-class string label, a float target."""
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, len(SCALES)))
    colour, size = rng.integers(0, 3, n), rng.integers(0, 4, n)
    score = 1.5 * z[:, 0] - 1.2 * z[:, 3] + 0.8 * z[:, 1] + np.array([-1.0, 0.0, 1.0])[colour]
    score += 0.3 * rng.normal(size=n)
    cls = np.where(score < -0.7, 1, np.where(score > 0.7, 0, 2))  # low / high / mid (alphabetical ids)
    target = 3.0 * z[:, 2] + 2.0 * z[:, 0] + np.array([0.0, 1.0, -1.0, 2.0])[size] + 0.5 * rng.normal(size=n)
    lines = ["a,b,c,d,colour,size,label,target"]
    for i in range(n):
        nums = ["NA" if rng.random() < 0.05 else f"{z[i, j] * SCALES[j] + 3 * SCALES[j]:.6g}" for j in range(4)]
        lines.append(",".join([*nums, COLOURS[colour[i]], SIZES[size[i]], CLASSES[cls[i]], f"{target[i]:.5f}"]))
    path.write_text("\n".join(lines) + "\n")


def _read(root: str, split: str) -> dict[str, np.ndarray]:
    """Every record of ``split`` as the trainer parses it (a missing float reads as NaN)."""
    import tensorflow as tf

    from shardprep.schema import schema_from_json
    from trainer.data import parse_spec

    m = manifest.load(root)
    spec = parse_spec(schema_from_json(m.features))
    files = [naming.join(root, s.path) for s in m.splits[split].shards]
    cols: dict[str, list] = {}
    for batch in tf.data.TFRecordDataset(files).batch(4096).map(lambda x: tf.io.parse_example(x, spec)):
        for k, v in batch.items():
            cols.setdefault(k, []).append(v.numpy())
    return {k: np.concatenate(v) for k, v in cols.items()}


def _by_hand(train: dict, held: dict, *, classification: bool, epochs: int) -> float:
    """The same (64, 64) network on inputs imputed, standardised and one-hot encoded by hand."""
    import keras
    import tensorflow as tf

    def design(d: dict) -> np.ndarray:
        parts = []
        for k in "abcd":
            x = train[k].astype(np.float64)
            mean, std = np.nanmean(x), np.nanstd(x)
            v = d[k].astype(np.float64)
            parts += [np.where(np.isnan(v), 0.0, (v - mean) / std)[:, None], np.isnan(v)[:, None]]
        for k, values in (("colour", COLOURS), ("size", SIZES)):
            parts.append(np.stack([d[k] == v.encode() for v in values], 1))
        return np.concatenate(parts, 1).astype(np.float32)

    def target(d: dict) -> np.ndarray:
        if classification:
            return np.array([CLASSES.index(v.decode()) for v in d["label"]])
        return d["target"].astype(np.float32)

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.layers.Dense(64, activation="relu"), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(3 if classification else 1)])
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True) if classification else "mse"
    model.compile(keras.optimizers.Adam(1e-3), loss, metrics=["accuracy"] if classification else [])
    try:
        model.fit(design(train), target(train), batch_size=64, epochs=epochs, verbose=0)
        result = model.evaluate(design(held), target(held), verbose=0)
    finally:  # a global TF seed left set breaks trainer.data's epoch-seeded shuffle in later tests of this process
        tf.random.set_seed(None)
    return float(result[1]) if classification else float(result)


@pytest.mark.slow
def test_mlp_with_default_preprocessing_matches_a_model_standardised_by_hand(tmp_path):
    from tests.conftest import run_cli

    _write_csv(tmp_path / "data.csv", 6000)
    ds = tmp_path / "ds"
    run_cli("shardprep.run", "--input", tmp_path / "data.csv", "--output", ds, "--workers", 2, "--split",
            "train=0.8,eval=0.2", "--statistics", check=True)
    m = manifest.load(str(ds))
    assert m.features["a"]["dtype"] == "float32" and m.features["a"]["nullable"] is True
    epochs = 8
    common = ["--data", ds, "--model", "mlp", "--per-replica-batch", 64, "--epochs", epochs, "--eval-split", "eval"]

    proc = run_cli("trainer.train", *common, "--label", "label", "--features", "a,b,c,d,colour,size",
                   "--model-dir", tmp_path / "cls", check=True)
    assert "3 classes from its string values (high, low, mid)" in proc.stdout
    assert "mlp feature colour (string): one-hot over 3 values" in proc.stdout
    assert "missing imputed with the mean + an indicator" in proc.stdout
    summary = json.loads((tmp_path / "cls" / "summary" / "worker-0.json").read_text())
    assert summary["label_vocabulary"] == list(CLASSES) and summary["eval_unseen_labels"] == 0
    labels = json.loads((tmp_path / "cls" / "export" / "labels.json").read_text())
    assert labels == {"label": "label", "vocabulary": list(CLASSES)}

    train, held = _read(str(ds), "train"), _read(str(ds), "eval")
    by_hand = _by_hand(train, held, classification=True, epochs=epochs)
    assert by_hand > 0.85, by_hand  # the signal is there
    assert summary["eval_accuracy"] >= by_hand - 0.02, (summary["eval_accuracy"], by_hand)
    summary_cls = summary

    proc = run_cli("trainer.launch", "--workers", 2, "--", *common, "--label", "target", "--features",
                   "a,b,c,d,colour,size", "--model-dir", tmp_path / "reg", check=True)
    summary = json.loads((tmp_path / "reg" / "summary" / "worker-0.json").read_text())
    variance = float(np.var(held["target"]))
    assert abs(summary["eval_baseline_mse"] - variance) < 0.05 * variance  # predicting the training mean
    assert summary["eval_mse"] <= variance / 2, (summary["eval_mse"], variance)
    table = proc.stdout.strip().splitlines()[-4:]  # launch ends with the per-worker table and the eval line
    assert table[0].split()[:3] == ["worker", "mode", "steps"]
    assert table[-1].startswith(f"eval split 'eval': {len(held['target'])} examples")
    assert f"mse {summary['eval_mse']:.6g} (baseline predicting the mean: {summary['eval_baseline_mse']:.6g})" in table[-1]
    print(f"classification: mlp {summary_cls['eval_accuracy']:.4f}, by hand {by_hand:.4f}; regression: mse "
          f"{summary['eval_mse']:.4f}, baseline {summary['eval_baseline_mse']:.4f}, variance {variance:.4f}")


@pytest.mark.parametrize(
    "spec, stats, flag, expected",
    [
        ({"dtype": "float32"}, {}, None, (None, ())),
        ({"dtype": "int64"}, {}, None, (2, ())),  # no statistics: the old default, checked by the input pipeline
        ({"dtype": "int64"}, {"y": {"min": 0, "max": 4}}, None, (5, ())),
        ({"dtype": "int64", "names": ["a", "b", "c"]}, {"y": {"min": 0, "max": 1}}, None, (3, ())),
        ({"dtype": "string"}, {"y": {"distinct": 3, "top": [["b", 9], ["c", 4], ["a", 4]]}}, None, (3, ("a", "b", "c"))),
    ],
)
def test_the_label_decides_num_classes(spec, stats, flag, expected):
    from shardprep.schema import FeatureSpec
    from trainer.labels import resolve_label

    info = resolve_label("y", FeatureSpec(**spec), stats, num_classes=flag)
    assert (info.num_classes, info.vocabulary) == expected


@pytest.mark.parametrize(
    "spec, stats, flag, message",
    [
        ("int64", {"y": {"min": 0, "max": 4}}, 3, "outside [0, 3): --num-classes 3 is too small"),
        ("int64", {"y": {"min": -1, "max": 1}}, None, "labels run from -1 to 1"),
        ("string", {}, None, "re-run your `shardprep.run` command with `--statistics --overwrite` added"),
        ("string", {"y": {"distinct": 5, "top": [["a", 3], ["b", 2]]}}, None, "--stats-top-k 5"),
        ("string", {"y": {"distinct": 2, "top": [["a", 3], ["b", 2]]}}, 3, "--num-classes 3 differs from the 2 values"),
    ],
)
def test_label_refusals_name_the_flag(spec, stats, flag, message):
    from shardprep.schema import FeatureSpec
    from trainer.labels import LabelError, resolve_label

    with pytest.raises(LabelError) as e:
        resolve_label("y", FeatureSpec(spec), stats, num_classes=flag)
    assert message in str(e.value)


@pytest.mark.slow
def test_a_class_id_past_the_default_num_classes_stops_naming_the_flag(tmp_path):
    from tests.conftest import run_cli

    (tmp_path / "a.csv").write_text("x,y\n" + "".join(f"{i / 10},{i % 3}\n" for i in range(300)))
    # without statistics (with them, the default would be max(label) + 1 = 3, as the next lines check)
    run_cli("shardprep.run", "--input", tmp_path / "a.csv", "--output", tmp_path / "ds", "--num-shards", 2,
            "--statistics", "off", check=True)
    run_cli("shardprep.run", "--input", tmp_path / "a.csv", "--output", tmp_path / "auto", "--num-shards", 2, check=True)
    run_cli("trainer.train", "--data", tmp_path / "auto", "--model", "mlp", "--label", "y", "--per-replica-batch", 16,
            "--epochs", 1, "--model-dir", tmp_path / "m0", check=True)
    proc = run_cli("trainer.train", "--data", tmp_path / "ds", "--model", "mlp", "--label", "y", "--per-replica-batch",
                   16, "--epochs", 1, "--model-dir", tmp_path / "m")
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert last.endswith("--num-classes 2 is too small (or the label is not a class id); pass --num-classes with the number of classes")


@pytest.mark.slow
def test_defaults_alone_train_with_identifiers_left_out_and_unlabelled_records_skipped(tmp_path):
    """Issue 34: `trainer.launch --workers 2 -- --data DS --label L --eval-split eval` alone trains: model, batch,
    epochs and model folder chosen and logged in one line; an identifier column left out with one line; a missing
    label refused offering --skip-missing-label, which then trains with equal full batches on every worker."""
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT, run_cli

    rng = np.random.default_rng(0)
    lines = ["name,n,x,colour,label"]
    for i in range(400):
        x, n, c = rng.normal(), int(rng.integers(0, 20)), int(rng.integers(0, 3))
        label = int(x + (n - 10) / 5 + (c == 0) > 0.5)
        lines.append(f"car-{i:04d},{'' if i % 17 == 0 else n},{x:.4f},{COLOURS[c]},{'' if i % 80 == 3 else label}")
    (tmp_path / "t.csv").write_text("\n".join(lines) + "\n")
    run_cli("shardprep.run", "--input", tmp_path / "t.csv", "--output", tmp_path / "ds", "--workers", 2, "--split",
            "train=0.9,eval=0.1", check=True)

    def launch(*extra: str) -> subprocess.CompletedProcess:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        return subprocess.run([sys.executable, "-m", "trainer.launch", "--workers", "2", "--", "--data", "ds", "--label",
                               "label", "--eval-split", "eval", *extra], capture_output=True, text=True, env=env,
                              cwd=tmp_path, timeout=600)

    refused = launch()
    assert refused.returncode != 0
    assert "add --skip-missing-label to train on the records that have it" in refused.stdout + refused.stderr
    proc = launch("--skip-missing-label")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert "left out of the default features as identifier-like" in out and "name (" in out
    m = manifest.load(str(tmp_path / "ds"))
    unlabelled = {name: m.statistics[name]["label"]["missing"] for name in ("train", "eval")}
    assert sum(unlabelled.values()) == 5
    assert (f"--skip-missing-label: {unlabelled['train']} of {m.splits['train'].num_records} records of split 'train' "
            "lack label 'label' and are skipped") in out
    assert "defaults chosen: --model mlp (from the features); --per-replica-batch 8" in out
    assert "--model-dir model-ds; learning rate 0.001" in out
    assert "mlp feature n (int64): standardised, missing imputed with the mean + an indicator" in out
    summaries = [json.loads((tmp_path / "model-ds" / "summary" / f"worker-{w}.json").read_text()) for w in (0, 1)]
    assert summaries[0]["steps"] == summaries[1]["steps"] >= 200
    assert all(s["empty_replica_steps"] == 0 for s in summaries)
    assert summaries[0]["eval_examples"] == m.splits["eval"].num_records - unlabelled["eval"]
    assert summaries[0]["eval_accuracy"] > 0.8, summaries[0]
