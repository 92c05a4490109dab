"""``python -m benchmarks.tfrecord_gb [--copies 6] [--small]``: ~1 GB of TFRecord, every core vs one process.

Issue 11 asks for peak memory <= 500 MB at 1 GB of TFRecord input, and for proof that a big file is
cut across workers. The input is the benchmark's TF-written 300k-record set
(``benchmarks.data.tfrecord_set``: ~300-byte Examples) concatenated ``--copies`` times into one file
(the same Examples repeated: a run's memory and time depend on sizes, not values), cut into 64 MB
units; with ``--small``, as many bytes of ~90-byte Examples (``benchmarks.data.small_records``:
~10M records, where anything the run holds per record shows). The default
(every core) and ``--local-workers 1`` run alternately, ``--rounds`` times, measured by
``benchmarks.harness.alternate`` (wall, CPU of the whole tree; peak RSS and PSS of the tree in a
round of its own).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys

from benchmarks import data
from benchmarks.harness import PYTHON, Contender, alternate

WORK = os.path.join(data.DATA_DIR, "work", "tfrecord_gb")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.tfrecord_gb")
    ap.add_argument("--copies", type=int, default=6, help="times the 300k set is repeated (6: ~1.07 GB)")
    ap.add_argument("--shards", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--small", action="store_true", help="~90-byte Examples instead of ~300 (3.6x the records)")
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
    records = 300_000 * args.copies
    if args.small:
        records = data.small_records(one, os.path.getsize(one))
    mb = os.path.getsize(one) / 1e6
    out = os.path.join(WORK, "out")
    contenders = [Contender(name, [PYTHON, "-m", "shardprep.run", "--input", one, "--output", out,
                                   "--num-shards", str(args.shards), *extra],
                            prepare=lambda: shutil.rmtree(out, ignore_errors=True))
                  for name, extra in (("default", []), ("one process", ["--local-workers", "1"]))]
    runs = alternate(contenders, args.rounds, log=lambda line: print(line, file=sys.stderr, flush=True))
    results = {name: [{"wall_s": round(r.wall_s, 2), "cpu_s": round(r.cpu_s, 2), "tree_rss_mb": round(r.tree_rss_mb, 1),
                       "tree_pss_mb": round(r.tree_pss_mb, 1)} for r in rs] for name, rs in runs.items()}
    shutil.rmtree(WORK, ignore_errors=True)
    best = {name: min(runs, key=lambda r: r["wall_s"]) for name, runs in results.items()}
    print(json.dumps({"input_mb": round(mb, 1), "records": records, "best": best, "runs": results,
                      "speedup": round(best["one process"]["wall_s"] / best["default"]["wall_s"], 3),
                      "load": os.getloadavg()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
