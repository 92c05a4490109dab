"""Statistics in the manifest (exact, the same whatever the grouping), ``inspect`` showing them, and
``mlp`` standardising its numeric inputs with them inside the model."""
from __future__ import annotations

import math
import random
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from shardprep import example, inspect, manifest, run
from shardprep.schema import FeatureSpec
from shardprep.stats import distinct as distinct_sketch
from shardprep.stats import feature_stats

FEATURES = {"x": FeatureSpec("float32"), "n": FeatureSpec("int64"), "c": FeatureSpec("string"),
            "v": FeatureSpec("float32", (-1,))}


def _records(rows: list[dict]) -> list[bytes]:
    encode = example.example_encoder(FEATURES, on_missing="omit")
    return [encode(r) for r in rows]


def _rows(n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    return [{"x": None if i % 10 == 3 else rng.uniform(-1e4, 1e4), "n": rng.randrange(-5, 50),
             "c": rng.choice(["a", "b", "b", "c"]), "v": [rng.random() for _ in range(rng.randrange(0, 4))]}
            for i in range(n)]


def test_statistics_are_exact_and_do_not_depend_on_grouping():
    rows = _rows(400)
    records = _records(rows)
    whole = feature_stats.to_json(feature_stats.batch_stats(records, FEATURES), FEATURES)
    parts = [feature_stats.batch_stats(records[i:i + 37], FEATURES) for i in range(0, 400, 37)]
    random.Random(1).shuffle(parts)
    merged: dict = {}
    for part in parts:
        merged = feature_stats.merge(merged, part)
    assert feature_stats.to_json(merged, FEATURES) == whole
    xs = np.array([r["x"] for r in rows if r["x"] is not None], np.float32).astype(np.float64)
    x = whole["x"]
    assert (x["count"], x["missing"]) == (360, 40)
    assert x["mean"] == pytest.approx(xs.mean(), rel=1e-12) and x["std"] == pytest.approx(xs.std(), rel=1e-9)
    assert (x["min"], x["max"]) == (xs.min(), xs.max())
    assert whole["v"]["length_min"] == 0 and whole["v"]["length_max"] == 3
    counts = {k: sum(r["c"] == k for r in rows) for k in "abc"}
    assert whole["c"]["distinct"] == 3 and whole["c"]["top"][0] == ["b", counts["b"]]
    assert whole["n"]["mean"] == pytest.approx(np.mean([r["n"] for r in rows]), rel=1e-12)


def test_top_values_break_ties_by_value_and_stop_at_k():
    records = _records([{"x": 1.0, "n": 1, "c": c, "v": []} for c in ["z", "y", "x", "y", "z", "w"]])
    doc = feature_stats.to_json(feature_stats.batch_stats(records, FEATURES), FEATURES, top_k=2)
    assert doc["c"]["top"] == [["y", 2], ["z", 2]] and doc["c"]["distinct"] == 4


def _csv(path: Path, n: int) -> None:
    rng = random.Random(7)
    lines = ["small,big,city,label"]
    for i in range(n):
        small = "NA" if i % 20 == 0 else f"{rng.gauss(0.002, 0.001):.6f}"
        lines.append(f"{small},{rng.gauss(5000, 2000):.2f},{rng.choice(['Paris', 'Lyon', 'Nice'])},{i % 3}")
    path.write_text("\n".join(lines) + "\n")


def test_pipeline_writes_the_same_statistics_whatever_the_units(tmp_path, capsys):
    _csv(tmp_path / "a.csv", 3000)
    docs = []
    for unit_mb in ("1", "0.01"):  # one work unit, then many: other groupings, the same statistics
        out = tmp_path / f"out{unit_mb}"
        assert run.main(["--input", str(tmp_path / "a.csv"), "--output", str(out), "--num-shards", "2",
                         "--split", "train=0.8,eval=0.2", "--unit-mb", unit_mb, "--statistics"]) == 0
        docs.append(manifest.load(str(out)).statistics)
    assert docs[0] == docs[1]
    train, evals = docs[0]["train"], docs[0]["eval"]
    assert train["small"]["count"] + evals["small"]["count"] == 2850
    assert train["small"]["missing"] + evals["small"]["missing"] == 150
    assert train["big"]["mean"] == pytest.approx(5000, rel=0.05) and train["big"]["std"] == pytest.approx(2000, rel=0.1)
    assert train["city"]["distinct"] == 3 and sorted(v for v, _ in train["city"]["top"]) == ["Lyon", "Nice", "Paris"]
    capsys.readouterr()
    assert inspect.main([str(tmp_path / "out1")]) == 0
    shown = capsys.readouterr().out
    assert "statistics of 'train'" in shown and "'Paris'" in shown
    q = docs[0]["train"]["big"]["quantiles"]
    assert "p5 / median / p95" in shown and f"{q['p5']:.4g} / {q['p50']:.4g} / {q['p95']:.4g}" in shown


def test_mlp_standardises_inside_the_model():
    pytest.importorskip("tensorflow")
    from trainer import models

    features = {"small": FeatureSpec("float32"), "big": FeatureSpec("float32")}
    statistics = {"small": {"mean": 0.002, "std": 0.001}, "big": {"mean": 5000.0, "std": 2000.0}}
    model = models.build_model("mlp", features=features, label="y", num_classes=3, statistics=statistics)
    layer = model.get_layer("standardise_big")
    out = layer(np.array([[7000.0]], np.float32))
    assert math.isclose(float(np.asarray(out)[0, 0]), 1.0, rel_tol=1e-5)  # raw value in, standardised inside
    plain = models.build_model("mlp", features=features, label="y", num_classes=3)
    assert not any(layer.name.startswith("standardise") for layer in plain.layers)


@pytest.mark.slow
def test_missing_numbers_train_and_a_label_with_gaps_is_refused_naming_required(tmp_path):
    from tests.conftest import run_cli

    _csv(tmp_path / "a.csv", 600)  # 'small' is NA in every 20th row: nullable, read as 0 by the trainer
    out = tmp_path / "ds"
    run_cli("shardprep.run", "--input", tmp_path / "a.csv", "--output", out, "--num-shards", 2, check=True)
    assert manifest.load(str(out)).features["small"]["nullable"] is True
    common = ["--data", out, "--model", "mlp", "--features", "small,big", "--num-classes", 3,
              "--per-replica-batch", 32, "--epochs", 1]
    run_cli("trainer.train", *common, "--label", "label", "--model-dir", tmp_path / "m1", check=True)

    gaps = tmp_path / "b.csv"
    gaps.write_text("x,y\n" + "".join(f"{i / 7:.3f},{'' if i % 9 == 0 else i % 2}\n" for i in range(200)))
    run_cli("shardprep.run", "--input", gaps, "--output", tmp_path / "ds2", "--num-shards", 2, check=True)
    proc = run_cli("trainer.train", "--data", tmp_path / "ds2", "--model", "mlp", "--label", "y", "--per-replica-batch",
                   16, "--epochs", 1, "--model-dir", tmp_path / "m2")
    last = proc.stderr.strip().splitlines()[-1]  # (TensorFlow's own start-up lines may come before it)
    assert proc.returncode == 2 and "--required y" in last and "Traceback" not in proc.stderr
    run_cli("shardprep.run", "--input", gaps, "--output", tmp_path / "ds3", "--num-shards", 2, "--required", "y",
            "--max-bad-records", 23, check=True)
    assert manifest.load(str(tmp_path / "ds3")).accounting.rejected == 23
    run_cli("trainer.train", "--data", tmp_path / "ds3", "--model", "mlp", "--label", "y", "--per-replica-batch", 16,
            "--epochs", 1, "--model-dir", tmp_path / "m3", check=True)


def test_float_sums_are_the_exact_integers_of_every_value():
    """``feature_stats._scaled_total`` (vectorised) against a Python int per value: float32 values times 2**149
    and their squares times 2**298, from subnormals to the largest float32, both signs."""
    rng = np.random.default_rng(3)
    f32 = np.finfo(np.float32)
    cases = [rng.uniform(-1e4, 1e4, 20_000), rng.standard_normal(2000) * 1e-40,
             rng.standard_normal(20_000) * 10.0 ** rng.integers(-45, 38, 20_000), np.full(5000, 3.3e38),
             [f32.max, -f32.max, f32.tiny, 1.4e-45, -1.4e-45, 0.0, -0.0, 1.0, -1.0], []]
    for values in cases:
        x = np.asarray(values, np.float32).astype(np.float64)
        x = x[np.isfinite(x)]
        assert feature_stats._scaled_total(x, 149, 24) == sum(int(v * 2.0**149) for v in x.tolist())
        assert feature_stats._scaled_total(x * x, 298, 48) == sum(int(v * v * 2.0**298) for v in x.tolist())


def test_top_values_are_those_of_a_full_sort():
    rng = random.Random(5)
    for distinct, k in ((50, 10), (3000, 1000), (10, 20), (500, 0), (2000, 1)):
        counts = Counter({f"v{rng.randrange(10**6)}".encode(): rng.choice([1, 1, 1, 2, 3, 7]) for _ in range(distinct)})
        exact = distinct_sketch.StringCounts(pa.array(list(counts), pa.large_binary()), np.array(list(counts.values())))
        assert exact.top(k) == sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:k]


def test_inspect_shows_bytes_by_type_and_size_and_floats_as_float32() -> None:
    png = b"\x89PNG\r\n\x1a\n" + bytes(1226)
    assert inspect._show([png]) == "<PNG 1,234 bytes>"
    assert inspect._show([b"\xff\xfe\x00"]) == "<binary 3 bytes>"
    assert inspect._show([b"cat"]) == '"cat"'
    assert inspect._show([float(np.float32(13.8))]) == "13.8"
    assert inspect._show([float(np.float32(0.1)), 2.5]) == "[0.1, 2.5]"
