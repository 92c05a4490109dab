"""``python -m benchmarks.tfrecord_gb [--copies 6]``: ~1 GB of TFRecord, every core vs one process.

Issue 11 asks for peak memory <= 500 MB at 1 GB of TFRecord input, and for proof that a big file is
cut across workers. The input is the benchmark's TF-written 300k-record set
(``benchmarks.data.tfrecord_set``) concatenated ``--copies`` times into one file (the same Examples
repeated: a run's memory and time depend on sizes, not values), cut into 64 MB units. The default
(every core) and ``--local-workers 1`` run alternately, ``--rounds`` times, measured by
``benchmarks.harness`` (wall, CPU of the whole tree, peak RSS and PSS of the tree).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys

from benchmarks import data
from benchmarks.harness import PYTHON, run_process

WORK = os.path.join(data.DATA_DIR, "work", "tfrecord_gb")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.tfrecord_gb")
    ap.add_argument("--copies", type=int, default=6, help="times the 300k set is repeated (6: ~1.07 GB)")
    ap.add_argument("--shards", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args(argv)
    files = data.tfrecord_files(data.tfrecord_set(300_000))
    inputs = os.path.join(WORK, "in")
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(inputs)
    one = os.path.join(inputs, "all.tfrecord")
    with open(one, "wb") as out:
        for _ in range(args.copies):
            for f in files:
                with open(f, "rb") as src:
                    shutil.copyfileobj(src, out, 16 << 20)
    mb = os.path.getsize(one) / 1e6
    results: dict[str, list] = {"default": [], "one process": []}
    for _ in range(args.rounds):
        for name, extra in (("default", []), ("one process", ["--local-workers", "1"])):
            out = os.path.join(WORK, "out")
            shutil.rmtree(out, ignore_errors=True)
            run = run_process([PYTHON, "-m", "shardprep.run", "--input", one, "--output", out,
                               "--num-shards", str(args.shards), *extra])
            if run.returncode:
                print(run.tail, file=sys.stderr)
                return 1
            results[name].append({"wall_s": round(run.wall_s, 2), "cpu_s": round(run.cpu_s, 2),
                                  "tree_rss_mb": round(run.tree_rss_mb, 1), "tree_pss_mb": round(run.tree_pss_mb, 1)})
            print(name, results[name][-1], file=sys.stderr, flush=True)
    shutil.rmtree(WORK, ignore_errors=True)
    best = {name: min(runs, key=lambda r: r["wall_s"]) for name, runs in results.items()}
    print(json.dumps({"input_mb": round(mb, 1), "best": best, "runs": results,
                      "speedup": round(best["one process"]["wall_s"] / best["default"]["wall_s"], 3),
                      "load": os.getloadavg()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
