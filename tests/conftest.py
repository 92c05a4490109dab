"""Shared test helpers: sample data writers and a TensorFlow reader of finished data sets."""
from __future__ import annotations

import csv
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def write_csv(path: Path, rows: list[dict], *, newline: str = "\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator=newline)
        w.writeheader()
        w.writerows(rows)
    return path


def sample_rows(n: int, *, start: int = 0, seed: int = 0) -> list[dict]:
    """Rows with 3 float columns, an int id, an int label and a text column with commas."""
    rng = random.Random(seed + start)
    words = ["a", "b, c", 'quoted "q"', "two\nlines"]
    rows = []
    for i in range(start, start + n):
        x = [round(rng.uniform(-1, 1), 4) for _ in range(3)]
        rows.append({"id": i, "x0": x[0], "x1": x[1], "x2": x[2], "label": int(x[0] + x[1] > 0),
                     "text": f"row {i}, words {rng.choice(words)}"})
    return rows


def uneven_csvs(folder: Path, total: int, shares=(0.7, 0.25, 0.05)) -> list[Path]:
    """Three CSV files of very unequal size holding ``total`` rows with ids 0..total-1."""
    paths, start = [], 0
    for i, share in enumerate(shares):
        n = total - start if i == len(shares) - 1 else int(total * share)
        paths.append(write_csv(folder / f"part-{i}.csv", sample_rows(n, start=start)))
        start += n
    return paths


def run_cli(module: str, *args: str, check: bool = False) -> subprocess.CompletedProcess:
    """Runs ``python -m module args`` in a fresh process, as a user would."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", module, *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=600)
    if check and proc.returncode:
        raise AssertionError(f"{module} {args} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


def read_with_tensorflow(root: str, split: str) -> list[dict]:
    """Every record of a split, parsed by TensorFlow with the manifest's feature spec."""
    tf = pytest.importorskip("tensorflow")
    from shardprep import manifest, naming

    m = manifest.load(root)
    spec = {}
    for name, f in m.features.items():
        dtype = {"int64": tf.int64, "float32": tf.float32, "string": tf.string}[f["dtype"]]
        shape = f["shape"]
        spec[name] = tf.io.RaggedFeature(dtype) if shape == [-1] else tf.io.FixedLenFeature(shape, dtype)
    files = [naming.join(root, s.path) for s in m.splits[split].shards]
    ds = tf.data.TFRecordDataset(files, compression_type="GZIP" if m.compression == "gzip" else "")
    out = []
    for batch in ds.batch(4096).map(lambda x: tf.io.parse_example(x, spec)):
        cols = {k: (v.to_list() if isinstance(v, tf.RaggedTensor) else v.numpy().tolist()) for k, v in batch.items()}
        n = len(next(iter(cols.values())))
        out.extend({k: col[i] for k, col in cols.items()} for i in range(n))
    return out
