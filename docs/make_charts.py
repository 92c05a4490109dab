"""Draws the README's charts into docs/images/ (``python docs/make_charts.py``), never by hand.

- ``balance.png``: records per input file of the demo's raw CSV (``trainer.demo``: three files of
  70/25/5 %) beside records and bytes per shard of the data set ``shardprep.run`` makes from it.
- ``scaling.png``: re-shard time and peak memory against input size, drawn by
  ``benchmarks.report.plot_scaling`` from ``benchmarks/results/latest.json`` (what BENCHMARKS.md is
  generated from).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import report  # noqa: E402
from shardprep import manifest  # noqa: E402
from trainer import demo  # noqa: E402  (the sample rows only: no TensorFlow)

IMAGES = ROOT / "docs" / "images"
RESULTS = ROOT / "benchmarks" / "results" / "latest.json"
DEMO_ROWS = 20_000
DEMO_SHARDS = 16


def demo_dataset(folder: str, *, rows: int = DEMO_ROWS, shards: int = DEMO_SHARDS) -> tuple[list[str], str]:
    """Writes the demo's raw CSV under ``folder/raw`` and re-shards it into ``folder/ds``."""
    raw, ds = os.path.join(folder, "raw"), os.path.join(folder, "ds")
    paths = demo.write_raw(raw, rows=rows)
    subprocess.run([sys.executable, "-m", "shardprep.run", "--input", os.path.join(raw, "*.csv"), "--output", ds,
                    "--num-shards", str(shards), "--local-workers", "1"], check=True, cwd=ROOT,
                   env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True)
    return paths, ds


def plot_balance(raw_paths: list[str], ds: str, folder: str) -> str:
    """``balance.png``: the raw files' records, then the train split's records and KiB per shard."""
    plt = report.pyplot()
    m = manifest.load(ds)
    shards = m.splits["train"].shards
    file_rows = [sum(1 for _ in open(p, encoding="utf-8")) - 1 for p in raw_paths]
    fig, axes = plt.subplots(1, 3, figsize=(9, 2.6), gridspec_kw={"width_ratios": [1, 3, 3]})
    axes[0].bar([os.path.basename(p) for p in raw_paths], file_rows, color="tab:gray")
    axes[0].set_title("input files: records")
    axes[0].tick_params(axis="x", labelrotation=45)
    axes[1].bar(range(len(shards)), [s.num_records for s in shards], color="tab:green")
    axes[1].set_title(f"shards: records (min {min(s.num_records for s in shards):,}, "
                      f"max {max(s.num_records for s in shards):,})")
    axes[2].bar(range(len(shards)), [s.num_bytes / 1024 for s in shards], color="tab:blue")
    axes[2].set_title("shards: KiB")
    for ax in axes[1:]:
        ax.set_xlabel("shard")
    return report.save_figure(plt, fig, "balance.png", folder)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(IMAGES), help="folder of the PNG files (default: docs/images)")
    p.add_argument("--results", default=str(RESULTS), help="benchmark results JSON (default: %(default)s)")
    p.add_argument("--rows", type=int, default=DEMO_ROWS, help="demo rows for the balance chart (default: %(default)s)")
    args = p.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        raw_paths, ds = demo_dataset(tmp, rows=args.rows)
        print("wrote", plot_balance(raw_paths, ds, args.out))
    with open(args.results, encoding="utf-8") as f:
        scaling = report.plot_scaling(json.load(f), args.out)
    if scaling is None:
        print(f"{args.results} holds no scaling results: scaling.png not drawn", file=sys.stderr)
        return 1
    print("wrote", scaling)
    return 0


if __name__ == "__main__":
    sys.exit(main())
