"""Where the time of one ``shardprep.run`` goes, per stage.

``python -m benchmarks.profile --input 'benchmarks/data/csv-200k/*.csv'`` samples the main thread of
a DirectRunner run with py-spy (wall clock, idle included, so fsync and file I/O count) and puts
every sample in one stage by the frames on its stack. Without py-spy it falls back to cProfile
(deterministic, but it slows the many small encode calls about 2x more than the rest, so its
shares overstate encoding).
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence

__all__ = ["STAGES", "classify", "profile_run"]

# (stage, patterns): the first stage with a pattern found in the stack wins; patterns are matched
# against "function (file:line)" frames, leaf first within a stage's own check.
STAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("imports and start-up", ("_find_and_load", "_call_with_frames_removed (<frozen importlib")),
    ("plan: list, cut, sample, infer schema", ("plan_units", "sample_rows", "expand_inputs", "infer_schema",
                                                "find_cuts", "read_header")),
    ("parse: read + split CSV/JSON/TFRecord", ("read_csv", "_csv_records", "read_lines", "_lines (",
                                               "read_jsonl", "read_tfrecord", "read_parquet", "read_records",
                                               "decode_example", "read_unit")),
    ("parse: encode tf.train.Example", ("encode (shardprep/example/", "enc (shardprep/example/encoder.py",
                                        "_values (shardprep/example/encoder.py")),
    ("parse: TFRecord framing + CRC", ("frame (shardprep",)),
    ("parse: split hash, pack batch", ("split_index", "pack (shardprep")),
    ("parse: loop", ("Parse.process",)),
    ("assign: permutation, reorder", ("Assign",)),
    ("write: write + fsync shard", ("write_shard", "write_atomic")),
    ("write: gather + sort pieces", ("_WriteShards",)),
    ("commit: manifest", ("_Commit", "commit (shardprep")),
    ("Beam: coders, shuffle, bundles", ("apache_beam",)),
)
_PARSE_LEAF_STAGES = {name for name, _ in STAGES if name.startswith("parse: ") and name != "parse: loop"}


def classify(frames: Sequence[str]) -> str:
    """The stage of one sampled stack (root first)."""
    text = ";".join(frames)
    if "_Parse.process" in text:
        # Inside Parse: the innermost shardprep frame decides (reader vs encoder vs framing).
        for frame in reversed(frames):
            for name, patterns in STAGES:
                if name in _PARSE_LEAF_STAGES and any(p in frame for p in patterns):
                    return name
        return "parse: loop"
    for name, patterns in STAGES:
        if any(p in text for p in patterns):
            return name
    return "other (interpreter, logging, exit)"


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


def _cprofile_stages(path: str) -> collections.Counter:
    """Self time per stage from a cProfile dump, each function's callers walked to a stage."""
    import pstats

    stats = pstats.Stats(path).stats  # (file, line, func) -> (cc, nc, tt, ct, callers)

    def frame(key: tuple) -> str:
        file, line, func = key
        if func.startswith("<") and file == "~":
            return func
        short = re.sub(r".*/(site-packages|main)/", "", file)
        qual = func if not func.startswith("process") else func
        return f"{qual} ({short}:{line})"

    memo: dict[tuple, str] = {}

    def stage_of(key: tuple, depth: int = 0) -> str:
        if key in memo:
            return memo[key]
        memo[key] = "other (interpreter, logging, exit)"  # breaks cycles
        own = classify([frame(key)])
        if own.startswith("other") and depth < 40:
            callers = stats[key][4]
            if callers:
                # the caller with the largest cumulative share decides
                parent = max(callers, key=lambda k: callers[k][3] if isinstance(callers[k], tuple) else 0)
                own = stage_of(parent, depth + 1)
        elif own == "parse: loop" or own.startswith("Beam"):
            callers = stats[key][4]
            if own.startswith("Beam") and callers:
                parent = max(callers, key=lambda k: callers[k][3] if isinstance(callers[k], tuple) else 0)
                up = stage_of(parent, depth + 1)
                own = up if not up.startswith("other") else own
        memo[key] = own
        return own

    stages: collections.Counter = collections.Counter()
    for key, (_, _, tottime, _, _) in stats.items():
        stages[stage_of(key)] += tottime
    return stages


def profile_run(shardprep_args: Sequence[str], *, tool: str = "auto", rate: int = 250,
                python: str = sys.executable, keep: str | None = None) -> dict:
    """Runs ``python -m shardprep.run ARGS`` under a profiler; returns the stage breakdown."""
    spy = shutil.which("py-spy") or os.path.join(os.path.dirname(python), "py-spy")
    if tool == "auto":
        tool = "py-spy" if os.access(spy, os.X_OK) else "cprofile"
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "profile.out")
        cmd = [python, "-m", "shardprep.run", *shardprep_args]
        if tool == "py-spy":
            cmd = [spy, "record", "--idle", "--threads", "-r", str(rate), "-f", "raw", "-o", out, "--", *cmd]
        else:
            cmd = [python, "-m", "cProfile", "-o", out, *cmd[1:]]
        start = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            raise RuntimeError(f"profiled run failed ({proc.returncode}): {proc.stderr[-2000:]}")
        if keep:
            shutil.copy(out, keep)
        if tool == "py-spy":
            with open(out) as f:
                stages = _main_thread_stacks(f.read())
            unit = 1.0 / rate
        else:
            stages = _cprofile_stages(out)
            unit = 1.0
    total = sum(stages.values()) * unit
    rows = [
        {"stage": name, "seconds": round(n * unit, 3), "share": round(n * unit / total, 4) if total else 0.0}
        for name, n in stages.most_common()
    ]
    return {"tool": tool, "wall_s": round(wall, 3), "sampled_s": round(total, 3), "stages": rows}


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
    p.add_argument("--tool", choices=("auto", "py-spy", "cprofile"), default="auto")
    p.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    p.add_argument("--keep", help="copy the raw profile here")
    p.add_argument("--json", help="write the breakdown here as JSON")
    args, rest = p.parse_known_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        output = args.output or os.path.join(tmp, "ds")
        sp_args = [a for i in args.input for a in ("--input", i)]
        sp_args += ["--output", output, "--num-shards", str(args.num_shards), "--overwrite", *rest]
        result = profile_run(sp_args, tool=args.tool, rate=args.rate, keep=args.keep)
    print(format_table(result))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
