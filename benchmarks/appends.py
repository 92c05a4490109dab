"""Appends (issue 56), side by side in one run on one machine.

1. Appending 10% to a CSV data set (``--mb`` of CSV, default 200) against re-sharding the union
   (goal: the append takes at most 0.15x the time).
2. The trainer's input rate (``trainer.data.worker_batches``, parsed batches, one worker) over the
   same records as 10 generations (a base and 9 appends) and as one run (goal: >= 0.95x).

    python -m benchmarks.appends --mb 200 --rounds 2 --json out.json
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FLAGS = ("--num-shards", "16", "--split", "train=0.9,eval=0.1", "--statistics", "on")


def _csv(path: Path, start: int, n: int) -> None:
    rng = random.Random(start)
    with open(path, "w") as f:
        f.write("id,x0,x1,x2,x3,label,text\n")
        for i in range(start, start + n):
            f.write(f"{i},{rng.random():.6f},{rng.random():.6f},{rng.gauss(0, 1):.6f},{rng.randint(0, 999)},"
                    f"{rng.randint(0, 9)},word{rng.randint(0, 5000)} word{rng.randint(0, 5000)}\n")


def _run(*args: str) -> float:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "shardprep.run", *map(str, args)], check=True, env=env, cwd=ROOT,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def append_vs_union(work: Path, mb: float, rounds: int) -> dict:
    rows = int(mb * 1e6 / 75)  # ~75 bytes a row
    base, extra = work / "base.csv", work / "extra.csv"
    _csv(base, 0, rows)
    _csv(extra, rows, rows // 10)
    out: dict = {"csv_mb": round((base.stat().st_size + extra.stat().st_size) / 1e6, 1), "append_s": [], "union_s": []}
    for r in range(rounds):
        ds, union = work / f"ds{r}", work / f"union{r}"
        _run("--input", base, "--output", ds, *FLAGS)
        out["append_s"].append(round(_run("--input", extra, "--output", ds, "--append", *FLAGS), 2))
        out["union_s"].append(round(_run("--input", base, "--input", extra, "--output", union, *FLAGS), 2))
        shutil.rmtree(ds)
        shutil.rmtree(union)
    out["ratio"] = round(min(out["append_s"]) / min(out["union_s"]), 3)
    return out


def _rate(data: str, rounds: int) -> float:
    import trainer.data as data_
    import trainer.input as ti

    inp = ti.open(data, label="label", global_batch_size=256, num_workers=1)
    plan = inp.plan
    best = 0.0
    for _ in range(rounds):
        ds = data_.worker_batches(plan, worker=0, batch_size=256, batches_per_epoch=plan.steps_per_epoch, stop_epoch=1)
        start, n = time.perf_counter(), 0
        for features, _ in ds:
            n += int(features["id"].shape[0])
        best = max(best, n / (time.perf_counter() - start))
    return best


def input_rate(work: Path, rows: int, rounds: int) -> dict:
    one, gens = work / "one", work / "gens"
    parts = []
    for g in range(10):
        part = work / f"gen{g}.csv"
        _csv(part, g * rows // 10, rows // 10)
        parts.append(part)
    flags = ("--num-shards", "8", "--statistics", "on")
    _run(*[a for p in parts for a in ("--input", p)], "--output", one, *flags)
    for g, part in enumerate(parts):
        _run("--input", part, "--output", gens, *flags, *(["--append"] if g else []))
    a, b = _rate(str(one), rounds), _rate(str(gens), rounds)
    return {"records": rows, "one_run_rec_s": round(a), "ten_generations_rec_s": round(b), "ratio": round(b / a, 3)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mb", type=float, default=200.0, help="CSV size of the base data set (default: %(default)s)")
    p.add_argument("--rows", type=int, default=400_000, help="records of the input-rate data sets (default: %(default)s)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--json")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        result = {"append_vs_union": append_vs_union(Path(tmp), args.mb, args.rounds),
                  "input_rate": input_rate(Path(tmp), args.rows, args.rounds), "cores": os.cpu_count()}
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
