"""Appends (issue 56), side by side in one run on one machine.

1. Appending 10% to a CSV data set (``--mb`` of CSV, default 200) against re-sharding the union
   (goal: the append takes at most 0.15x the time).
2. The trainer's input rate (``trainer.data.worker_batches``, parsed batches, one worker) over the
   same records as 10 generations (a base and 9 appends) and as one run, epochs of the two
   alternating (goal: >= 0.95x).
3. ``--dedup exact`` on a CSV with no duplicates against the same run without it, the two
   alternating in each round (goal: at most +10% wall time).

    python -m benchmarks.appends --mb 200 --rounds 2 --json out.json
    python -m benchmarks.appends --only dedup --dedup-mb 100 --rounds 3
"""
from __future__ import annotations

import argparse
import json
import os
import random
import resource
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
    return _timed(*args)[0]


def _timed(*args: str) -> tuple[float, float]:
    """A ``shardprep.run``'s wall time, and the CPU time of it and its worker processes."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    subprocess.run([sys.executable, "-m", "shardprep.run", *map(str, args)], check=True, env=env, cwd=ROOT,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


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


def _epoch_rate(plan) -> tuple[float, float]:
    """Records a second of one epoch of ``plan``'s worker 0 (parsed batches of 256): of wall time, and of
    this process's CPU time (every thread: what the input costs, whatever else the machine runs)."""
    import trainer.data as data_

    ds = data_.worker_batches(plan, worker=0, batch_size=256, batches_per_epoch=plan.steps_per_epoch, stop_epoch=1)
    start, cpu, n = time.perf_counter(), time.process_time(), 0
    for features, _ in ds:
        n += int(features["id"].shape[0])
    return n / (time.perf_counter() - start), n / (time.process_time() - cpu)


def _rates(data: dict[str, str], rounds: int) -> dict[str, list[tuple[float, float]]]:
    """Each data set's epoch rate ``rounds`` times, the data sets alternating (ABBA...): on a shared
    machine a side measured after the other meets another load, which one round each cannot tell from
    the input's own cost."""
    import trainer.input as ti

    plans = {name: ti.open(path, label="label", global_batch_size=256, num_workers=1).plan for name, path in data.items()}
    out: dict[str, list[tuple[float, float]]] = {name: [] for name in data}
    for r in range(rounds):
        for name in (list(data) if r % 2 == 0 else list(data)[::-1]):
            out[name].append(_epoch_rate(plans[name]))
    return out


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
    rates = _rates({"one": str(one), "gens": str(gens)}, rounds)
    best = {name: max(w for w, _ in r) for name, r in rates.items()}
    median = {name: sorted(w for w, _ in r)[len(r) // 2] for name, r in rates.items()}
    cpu = {name: max(c for _, c in r) for name, r in rates.items()}
    return {"records": rows, "rounds": rounds, "one_run_rec_s": round(best["one"]),
            "ten_generations_rec_s": round(best["gens"]), "ratio": round(best["gens"] / best["one"], 3),
            "ratio_of_medians": round(median["gens"] / median["one"], 3),
            "cpu_one_run_rec_s": round(cpu["one"]), "cpu_ten_generations_rec_s": round(cpu["gens"]),
            "cpu_ratio": round(cpu["gens"] / cpu["one"], 3)}


def dedup_cost(work: Path, mb: float, rounds: int) -> dict:
    """A re-shard of ``mb`` of CSV with no repeated record, with and without ``--dedup exact``."""
    source = work / "dedup.csv"
    _csv(source, 0, int(mb * 1e6 / 75))
    out: dict = {"csv_mb": round(source.stat().st_size / 1e6, 1), "plain_s": [], "dedup_s": [], "plain_cpu_s": [],
                 "dedup_cpu_s": []}
    for r in range(rounds):
        for name, extra in (("plain", ()), ("dedup", ("--dedup", "exact")))[::1 if r % 2 == 0 else -1]:
            ds = work / f"dedup-{name}-{r}"
            wall, cpu = _timed("--input", source, "--output", ds, *FLAGS, *extra)
            out[f"{name}_s"].append(round(wall, 2))
            out[f"{name}_cpu_s"].append(round(cpu, 2))
            shutil.rmtree(ds)
    out["ratio"] = round(min(out["dedup_s"]) / min(out["plain_s"]), 3)
    out["cpu_ratio"] = round(min(out["dedup_cpu_s"]) / min(out["plain_cpu_s"]), 3)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mb", type=float, default=200.0, help="CSV size of the base data set (default: %(default)s)")
    p.add_argument("--rows", type=int, default=400_000, help="records of the input-rate data sets (default: %(default)s)")
    p.add_argument("--dedup-mb", type=float, default=100.0, help="CSV size of the --dedup cost runs (default: %(default)s)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--input-rounds", type=int, default=8, help="epochs of each data set for the input rate, the two "
                   "alternating (default: %(default)s)")
    p.add_argument("--only", choices=("append", "input", "dedup"), action="append",
                   help="run only these measurements (repeatable; default: all)")
    p.add_argument("--json")
    args = p.parse_args()
    only = set(args.only or ("append", "input", "dedup"))
    result: dict = {"cores": os.cpu_count()}
    with tempfile.TemporaryDirectory() as tmp:
        if "append" in only:
            result["append_vs_union"] = append_vs_union(Path(tmp), args.mb, args.rounds)
        if "input" in only:
            result["input_rate"] = input_rate(Path(tmp), args.rows, args.input_rounds)
        if "dedup" in only:
            result["dedup_cost"] = dedup_cost(Path(tmp), args.dedup_mb, args.rounds)
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
