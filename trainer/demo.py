"""``python -m trainer.demo``: the whole product on sample data, in a few minutes on a laptop.

1. Writes a learnable data set as 3 CSV files of very unequal size (70/25/5 %).
2. Re-shards it with ``python -m shardprep.run ... --workers 2 --split train=0.9,eval=0.1``.
3. Trains 2 local workers for 2 epochs with ``python -m trainer.launch``, then scores the eval split.
4. Prints each worker's summary: equal steps, no empty replica-steps, falling loss, accuracy, the
   input wait next to its floor (the distributed iterator's own cost), and the eval loss/accuracy.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import random
import shutil
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from trainer.metrics import summary_url
from trainer.run_table import print_table

__all__ = ["FEATURES", "main", "print_table", "reshard", "sample_rows", "train", "write_raw"]

FEATURES = [f"x{i}" for i in range(8)]
_SHARES = (0.70, 0.25, 0.05)
_WORDS = ("alpha", "beta", "gamma", "delta", "omega", "sigma", "kappa", "theta")


def sample_rows(n: int, *, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` rows: 8 float features, an int ``label`` they decide (with 5% noise), and a ``text``."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        x = [rng.gauss(0.0, 1.0) for _ in FEATURES]
        label = int(x[0] + 0.8 * x[1] * x[2] - 0.6 * x[3] + 0.3 * x[4] > 0)
        if rng.random() < 0.05:
            label = 1 - label
        cue = "bright sunny" if label else "dark rainy"
        text = " ".join([*rng.sample(_WORDS, 3), cue if rng.random() < 0.8 else ""]).strip()
        rows.append({**{f: round(v, 5) for f, v in zip(FEATURES, x)}, "label": label, "text": text})
    return rows


def write_raw(folder: str, *, rows: int = 20_000, seed: int = 0) -> list[str]:
    """Writes the sample rows to ``folder/raw-{0,1,2}.csv`` (70/25/5 %); returns the paths."""
    os.makedirs(folder, exist_ok=True)
    data = sample_rows(rows, seed=seed)
    paths, start = [], 0
    for i, share in enumerate(_SHARES):
        end = rows if i == len(_SHARES) - 1 else start + round(share * rows)
        path = os.path.join(folder, f"raw-{i}.csv")
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=[*FEATURES, "label", "text"])
            writer.writeheader()
            writer.writerows(data[start:end])
        paths.append(path)
        start = end
    return paths


def reshard(raw_dir: str, out_dir: str, *, workers: int) -> None:
    """Runs the re-shard CLI as a user would."""
    cmd = [
        sys.executable, "-m", "shardprep.run", "--input", os.path.join(raw_dir, "*.csv"), "--output", out_dir,
        "--workers", str(workers), "--split", "train=0.9,eval=0.1", "--overwrite",
    ]
    print("$", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def train(data_dir: str, model_dir: str, *, workers: int, epochs: int, extra: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Trains ``workers`` local workers through the launcher; returns their summaries."""
    cmd = [
        sys.executable, "-m", "trainer.launch", "--workers", str(workers), "--",
        "--data", data_dir, "--model", "mlp", "--label", "label", "--features", ",".join(FEATURES),
        "--per-replica-batch", "64", "--epochs", str(epochs), "--model-dir", model_dir,
        "--learning-rate", "0.01", "--checkpoint-every", "100", "--shuffle-buffer", "1024", "--eval-split", "eval", *extra,
    ]
    print("$", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)
    summaries = []
    for w in range(workers):
        with open(summary_url(model_dir, w)) as f:
            summaries.append(json.load(f))
    return summaries


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="trainer.demo", description=__doc__.splitlines()[0])
    p.add_argument("--out", default="demo", help="demo folder (default: ./demo), replaced on every run")
    p.add_argument("--rows", type=int, default=20_000)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--epochs", type=int, default=2)
    args = p.parse_args(argv)
    if os.path.exists(args.out):
        shutil.rmtree(args.out)
    raw, data, run = (os.path.join(args.out, name) for name in ("raw", "ds", "run"))
    write_raw(raw, rows=args.rows)
    try:
        reshard(raw, data, workers=args.workers)
        summaries = train(data, run, workers=args.workers, epochs=args.epochs)
    except subprocess.CalledProcessError as e:
        print(f"trainer.demo: error: {' '.join(e.cmd[1:4])} ... exited with {e.returncode}", file=sys.stderr)
        return 1
    steps = {s["steps"] for s in summaries}
    empty = sum(s["empty_replica_steps"] for s in summaries)
    print(f"equal steps on every worker: {len(steps) == 1}; empty replica-steps: {empty}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
