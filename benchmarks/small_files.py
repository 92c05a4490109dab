"""Many small files (issue 62): the default re-shard against a plain loop that reads every file.

Three inputs: 50,000 CSV files of two rows, 50,000 small JSON Lines files (1-4 rows), and 5,000
small Parquet files of a few row groups each. For each, side by side in alternated rounds
(``harness.alternate``; medians):

- ``loop``: a Python process that lists the files and opens and reads each one (Parquet:
  ``pyarrow.parquet.read_table`` of each), the least any reader does;
- ``fixed``: the default re-shard of one of those files, the run's fixed cost (imports, planning,
  the worker pool, the commit);
- ``shardprep``: the default re-shard of them all (``--num-shards 16``).

The goal: ``shardprep`` at most 3x (``loop`` + ``fixed``), in wall time; CPU seconds are given too,
as the machine may be shared (its load average is recorded at the start and the end).

    python -m benchmarks.small_files [--files 50000] [--parquet-files 5000] [--rounds 3] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks import harness

__all__ = ["main", "make_inputs", "measure"]

GOAL = 3.0
LOOP = {
    "csv": "import glob,sys\nfor p in sorted(glob.glob(sys.argv[1])):\n    open(p,'rb').read()",
    "jsonl": "import glob,sys\nfor p in sorted(glob.glob(sys.argv[1])):\n    open(p,'rb').read()",
    "parquet": "import glob,sys\nimport pyarrow.parquet as pq\nfor p in sorted(glob.glob(sys.argv[1])):\n"
               "    pq.read_table(p)",
}


def make_inputs(root: Path, files: int, parquet_files: int) -> dict[str, str]:
    """Writes the three inputs under ``root`` (100 folders each, as part files of many writers);
    returns each one's ``--input`` pattern."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = random.Random(62)
    ids = iter(range(1 << 40))
    for kind, count in (("csv", files), ("jsonl", files), ("parquet", parquet_files)):
        for i in range(count):
            folder = root / kind / f"w{i % 100:03d}"
            if i < 100:
                folder.mkdir(parents=True, exist_ok=True)
            n = 2 if kind == "csv" else rng.randint(1, 4) if kind == "jsonl" else rng.randint(6, 12)
            rows = [{"id": next(ids), "x": round(rng.uniform(-1e3, 1e3), 3), "label": rng.randint(0, 9),
                     "text": rng.choice(["alpha", "beta gamma", "delta, epsilon", "zeta"])} for _ in range(n)]
            path = folder / f"part-{i:06d}.{kind}"
            if kind == "csv":
                path.write_text("id,x,label,text\n" + "".join(f'{r["id"]},{r["x"]},{r["label"]},"{r["text"]}"\n'
                                                              for r in rows))
            elif kind == "jsonl":
                path.write_text("".join(json.dumps(r) + "\n" for r in rows))
            else:
                pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=4)  # 2-3 row groups
    return {kind: str(root / kind / "*" / f"*.{kind}") for kind in ("csv", "jsonl", "parquet")}


def _contenders(kind: str, pattern: str, out: Path) -> list[harness.Contender]:
    one = sorted(Path(pattern.split("*")[0]).glob(f"w000/*.{kind}"))[0]

    def fresh(folder: Path):
        return lambda: shutil.rmtree(folder, ignore_errors=True)

    run = [sys.executable, "-m", "shardprep.run", "--num-shards", "16"]
    return [
        harness.Contender("loop", [sys.executable, "-c", LOOP[kind], pattern]),
        harness.Contender("fixed", [*run[:-2], "--num-shards", "1", "--input", str(one), "--output", str(out / "one")],
                          prepare=fresh(out / "one")),
        harness.Contender("shardprep", [*run, "--input", pattern, "--output", str(out / "all")],
                          prepare=fresh(out / "all")),
    ]


def measure(patterns: dict[str, str], out: Path, rounds: int) -> dict[str, Any]:
    """Each input's contenders in alternated rounds; their medians, ratios and the goal."""
    results: dict[str, Any] = {"load_average_start": harness.load_average(), "cpus": os.cpu_count()}
    for kind, pattern in patterns.items():
        print(f"{kind}: {pattern}", flush=True)
        runs = harness.alternate(_contenders(kind, pattern, out / kind), rounds, memory_round=False)
        medians = {name: harness.summarize(r) for name, r in runs.items()}
        bound = medians["loop"]["wall_s"] + medians["fixed"]["wall_s"]
        ratio = medians["shardprep"]["wall_s"] / bound
        cpu_ratio = medians["shardprep"]["cpu_s"] / (medians["loop"]["cpu_s"] + medians["fixed"]["cpu_s"])
        results[kind] = {"files": len(list(Path(pattern.split("*")[0]).glob(f"*/*.{kind}"))), "medians": medians,
                         "run_over_loop_plus_fixed": round(ratio, 3), "cpu_run_over_loop_plus_fixed": round(cpu_ratio, 3),
                         "goal": harness.goal(f"{kind}: run <= {GOAL}x (loop + fixed cost), wall", ratio, GOAL,
                                              at_least=False)}
        print(json.dumps(results[kind]["goal"]), flush=True)
    results["load_average_end"] = harness.load_average()
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--files", type=int, default=50_000, help="CSV and JSON Lines files (default: %(default)s)")
    p.add_argument("--parquet-files", type=int, default=5_000, help="Parquet files (default: %(default)s)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--root", type=Path, help="where to write the inputs and outputs (default: a temp folder)")
    p.add_argument("--json", type=Path, help="also write the results here")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="small-files-", dir=args.root) as tmp:
        patterns = make_inputs(Path(tmp) / "in", args.files, args.parquet_files)
        results = measure(patterns, Path(tmp) / "out", args.rounds)
    text = json.dumps(results, indent=1)
    if args.json:
        args.json.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
