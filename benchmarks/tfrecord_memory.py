"""``python -m benchmarks.tfrecord_memory [--copies 6]``: peak memory of a re-shard of ~1 GB of TFRecord.

Issue 11 asks for peak memory <= 500 MB at 1 GB of TFRecord input. The input is the benchmark's
TF-written 300k-record set (``benchmarks.data.tfrecord_set``) concatenated ``--copies`` times into
two files (the same Examples repeated: the memory of a run depends on sizes, not on values). The
run uses the default flags (every core) and is measured by ``benchmarks.harness`` (wall, CPU of the
whole tree, peak RSS and PSS of the tree).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys

from benchmarks import data
from benchmarks.harness import PYTHON, run_process

WORK = os.path.join(data.DATA_DIR, "work", "tfrecord_memory")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.tfrecord_memory")
    ap.add_argument("--copies", type=int, default=6, help="times the 300k set is repeated (6: ~1.07 GB)")
    ap.add_argument("--shards", type=int, default=64)
    args = ap.parse_args(argv)
    files = data.tfrecord_files(data.tfrecord_set(300_000))
    inputs = os.path.join(WORK, "in")
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(inputs)
    for half in range(2):
        with open(os.path.join(inputs, f"part-{half}.tfrecord"), "wb") as out:
            for _ in range(args.copies // 2 + (half < args.copies % 2)):
                for f in files:
                    with open(f, "rb") as src:
                        shutil.copyfileobj(src, out, 16 << 20)
    mb = sum(os.path.getsize(os.path.join(inputs, n)) for n in os.listdir(inputs)) / 1e6
    run = run_process([PYTHON, "-m", "shardprep.run", "--input", os.path.join(inputs, "*.tfrecord"),
                       "--output", os.path.join(WORK, "out"), "--num-shards", str(args.shards)])
    shutil.rmtree(WORK, ignore_errors=True)
    if run.returncode:
        print(run.tail, file=sys.stderr)
        return 1
    result = {"input_mb": round(mb, 1), "wall_s": round(run.wall_s, 2), "cpu_s": round(run.cpu_s, 2),
              "tree_rss_mb": round(run.tree_rss_mb, 1), "tree_pss_mb": round(run.tree_pss_mb, 1),
              "max_rss_mb": round(run.max_rss_mb, 1), "load": os.getloadavg()}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
