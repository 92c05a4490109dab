"""Where the time of one ``shardprep.run`` goes, per stage.

``python -m benchmarks.profile --input 'benchmarks/data/csv-200k/*.csv'`` samples the main thread of
a one-process run (``--local-workers 1``: every stage runs on that thread; a forked pool's processes
would leave it waiting) with py-spy (wall clock, idle included, so fsync and file I/O count) and
puts every sample in one stage by the frames on its stack. The statistics' counting thread is not
sampled: its time shows where the main thread waits for it. py-spy comes with ``pip install -e
'.[dev]'`` (``make install``).
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence

__all__ = ["STAGES", "classify", "profile_run"]

# The job's stages (``shardprep.job``), by the class whose method is on the stack; within one, the
# innermost frame that matches a part of it decides (``PARTS``). Frames read "function (file:line)".
STAGES: tuple[tuple[str, str], ...] = (
    ("ExpandUnits.", "plan: work units"),
    ("CountRanges.", "count: line ranges"),
    ("Parse.", "parse: loop"),
    ("Assign.", "assign: permutation"),
    ("WriteShards.", "write: place records"),
    ("WriteRejected.", "write: dead letters"),
    ("MergeStats.", "statistics: merge"),
    ("Commit.", "commit: manifest"),
)
STATISTICS = ("shardprep/stats", "shardprep/stats/distinct.py", "shardprep/stats/sketches.py")
PARTS: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    "parse: loop": (
        ("statistics: count", STATISTICS),
        ("parse: spill to local files", ("shardprep/graph/spill.py",)),
        ("parse: encode tf.train.Example", ("shardprep/example/",)),
        ("parse: read + split CSV/JSON/TFRecord", ("shardprep/formats/", "shardprep/fs.py")),
    ),
    "write: place records": (
        ("statistics: count", STATISTICS),
        ("write: write + fsync shard", ("shardprep/writer.py", "write_atomic")),
    ),
}
LAUNCH = ("plan: list, sample, infer schema", ("shardprep/run.py", "shardprep/formats/", "shardprep/schema"))
OTHER = "other (interpreter, logging, exit)"


def classify(frames: Sequence[str]) -> str:
    """The stage of one sampled stack (root first)."""
    if any("_find_and_load" in f for f in frames):
        return "imports and start-up"
    found = next(((depth, stage) for depth in reversed(range(len(frames)))
                  for marker, stage in STAGES if marker in frames[depth]), None)
    if found:
        depth, stage = found
        return next((part for inner in reversed(frames[depth + 1:]) for part, patterns in PARTS.get(stage, ())
                     if any(p in inner for p in patterns)), stage)
    if any(p in f for f in frames for p in STATISTICS):  # partials pickled between stages
        return "statistics: merge"
    if any("pipelines/" in f or "shardprep/graph/tasks.py" in f or "shardprep/job.py" in f for f in frames):
        return "engine: stages, tasks"
    if any(p in f for f in frames for p in LAUNCH[1]):
        return LAUNCH[0]
    return OTHER


def _main_thread_stacks(raw: str) -> collections.Counter:
    """py-spy ``--format raw --threads`` lines -> Counter of stage, for the main thread only."""
    stages: collections.Counter = collections.Counter()
    threads: collections.Counter = collections.Counter()
    parsed = []
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        thread = frames[0] if frames and frames[0].startswith("thread (") else ""
        threads[thread] += int(count)
        parsed.append((thread, frames[1:] if thread else frames, int(count)))
    main = next((t for t in threads if "MainThread" in t), None) or (threads.most_common(1)[0][0] if threads else "")
    for thread, frames, count in parsed:
        if thread == main:
            stages[classify(frames)] += count
    return stages


def profile_run(shardprep_args: Sequence[str], *, rate: int = 250, python: str = sys.executable,
                keep: str | None = None) -> dict:
    """Runs ``python -m shardprep.run ARGS --local-workers 1`` under py-spy; returns the stage breakdown."""
    spy = shutil.which("py-spy") or os.path.join(os.path.dirname(python), "py-spy")
    if not os.access(spy, os.X_OK):
        raise RuntimeError("py-spy not found: pip install py-spy (it comes with make install)")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "profile.out")
        cmd = [spy, "record", "--idle", "--threads", "-r", str(rate), "-f", "raw", "-o", out, "--",
               python, "-m", "shardprep.run", *shardprep_args, "--local-workers", "1"]
        start = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            raise RuntimeError(f"profiled run failed ({proc.returncode}): {proc.stderr[-2000:]}")
        if keep:
            shutil.copy(out, keep)
        with open(out) as f:
            stages = _main_thread_stacks(f.read())
    unit = 1.0 / rate
    total = sum(stages.values()) * unit
    rows = [
        {"stage": name, "seconds": round(n * unit, 3), "share": round(n * unit / total, 4) if total else 0.0}
        for name, n in stages.most_common()
    ]
    return {"tool": "py-spy", "wall_s": round(wall, 3), "sampled_s": round(total, 3), "stages": rows}


def format_table(result: dict) -> str:
    lines = [f"{result['tool']}: wall {result['wall_s']:.2f} s (profiler included), {result['sampled_s']:.2f} s sampled",
             f"{'stage':42s} {'seconds':>8s} {'share':>7s}"]
    for row in result["stages"]:
        lines.append(f"{row['stage']:42s} {row['seconds']:8.2f} {100 * row['share']:6.1f}%")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.profile", description=__doc__.splitlines()[0])
    p.add_argument("--input", required=True, action="append", help="shardprep --input (repeatable)")
    p.add_argument("--output", help="data set folder (default: a temporary folder)")
    p.add_argument("--num-shards", type=int, default=64)
    p.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    p.add_argument("--keep", help="copy the raw profile here")
    p.add_argument("--json", help="write the breakdown here as JSON")
    args, rest = p.parse_known_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        output = args.output or os.path.join(tmp, "ds")
        sp_args = [a for i in args.input for a in ("--input", i)]
        sp_args += ["--output", output, "--num-shards", str(args.num_shards), "--overwrite", *rest]
        result = profile_run(sp_args, rate=args.rate, keep=args.keep)
    print(format_table(result))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
