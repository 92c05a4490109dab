"""Wide against long: the same cells as many columns x few rows and as few columns x many rows.

    python -m benchmarks.wide_tables [--quick] [--format csv|jsonl|parquet] [--statistics auto|on|off] [--rounds N] [--floor]

Writes both tables (random ints 0..999) in a child process, runs ``python -m shardprep.run`` on each
(wide and long alternated, ``--rounds`` times, fresh output folders), and prints the median wall
time, CPU time and peak RSS (children included) and the ratios wide / long. Issue 35 asks for at
most 3x. The tables are written by a spawned process so that this script stays small: a child
started from it inherits its peak RSS as a floor of its own (Linux keeps the high-water mark
across fork and exec), which had made a long Parquet run's 190 MB read 334 MB.
``--floor`` (Parquet) then times what pyarrow alone takes on each file (best of 3, in this
process): parsing the footer (``ParquetFile``, as the launcher does) and reading every row.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def _write(path: Path, columns: int, rows: int) -> Path:
    values = np.random.default_rng(0).integers(0, 1000, size=(rows, columns))
    names = [f"c{i}" for i in range(columns)]
    if path.suffix == ".csv":
        with open(path, "w") as f:
            f.write(",".join(names) + "\n")
            f.writelines(",".join(map(str, r)) + "\n" for r in values.tolist())
    elif path.suffix == ".jsonl":
        with open(path, "w") as f:
            f.writelines(json.dumps(dict(zip(names, r))) + "\n" for r in values.tolist())
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.table({n: values[:, i] for i, n in enumerate(names)}), path)
    return path


def _measure(src: Path, out: Path, statistics: str) -> dict:
    """One run in a child process (wait4 gives its peak RSS and CPU, its own children included)."""
    cmd = [sys.executable, "-m", "shardprep.run", "--input", str(src), "--output", str(out), "--num-shards", "4",
           "--statistics", statistics]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {proc.stderr.read().decode()[-2000:]}")
    sizes = {p.name: p.stat().st_size for p in out.glob("*.json")}
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "peak_mb": usage.ru_maxrss / 1024,
            "manifest_mb": sizes.get("manifest.json", 0) / 1e6, "features_mb": sizes.get("features.json", 0) / 1e6}


def _floor(path: Path) -> dict:
    """pyarrow's own cost on a Parquet file: its footer (and Arrow schema), then all its rows by record batch."""
    import pyarrow.parquet as pq

    def best(f) -> float:
        times = []
        for _ in range(3):
            start = time.process_time()
            f()
            times.append(time.process_time() - start)
        return min(times)

    footer = best(lambda: pq.ParquetFile(path).schema_arrow)
    pf = pq.ParquetFile(path, page_checksum_verification=True)
    read = best(lambda: sum(b.num_rows for b in pf.iter_batches(batch_size=65536)))
    return {"footer_s": footer, "read_s": read}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="100,000 cells (5,000 x 20 against 10 x 10,000)")
    p.add_argument("--format", default="csv", choices=("csv", "jsonl", "parquet"))
    p.add_argument("--statistics", default="auto", choices=("auto", "on", "off"))
    p.add_argument("--rounds", type=int, default=1, help="runs of each table, alternated; medians reported")
    p.add_argument("--floor", action="store_true", help="Parquet: time pyarrow alone on each file first")
    args = p.parse_args(argv)
    wide_cols, rows = (5000, 20) if args.quick else (50_000, 20)
    cells = wide_cols * rows
    shapes = {"wide": (wide_cols, rows), "long": (10, cells // 10)}
    with tempfile.TemporaryDirectory() as tmp:
        sources = {name: Path(tmp) / f"{name}.{args.format}" for name in shapes}
        with multiprocessing.get_context("spawn").Pool(1) as pool:
            pool.starmap(_write, [(sources[name], c, r) for name, (c, r) in shapes.items()])
        runs: dict[str, list[dict]] = {name: [] for name in shapes}
        for i in range(args.rounds):
            for name in shapes:
                runs[name].append(_measure(sources[name], Path(tmp) / f"out_{name}_{i}", args.statistics))
        results = {name: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for name, rs in runs.items()}
        for name, (c, r) in shapes.items():
            print(f"{name:5s} {c:>7,} cols x {r:>7,} rows: {results[name]['wall_s']:6.2f} s wall, "
                  f"{results[name]['cpu_s']:6.2f} s CPU, {results[name]['peak_mb']:6.0f} MB peak, manifest "
                  f"{results[name]['manifest_mb']:.2f} MB, features.json {results[name]['features_mb']:.2f} MB"
                  + (f" (medians of {args.rounds})" if args.rounds > 1 else ""))
        if args.floor and args.format == "parquet":  # after the runs: its reads would raise their peak RSS
            for name in shapes:
                floor = _floor(sources[name])
                print(f"{name:5s} pyarrow alone: footer {floor['footer_s']:.3f} s CPU, all rows {floor['read_s']:.3f} s CPU")
    w, lo = results["wide"], results["long"]
    print(f"ratio wide/long ({cells:,} cells, {args.format}, --statistics {args.statistics}): "
          f"wall {w['wall_s'] / lo['wall_s']:.2f}x, CPU {w['cpu_s'] / lo['cpu_s']:.2f}x, "
          f"peak RSS {w['peak_mb'] / lo['peak_mb']:.2f}x (issue 35: at most 3x)")
    print(f"(this script's own peak: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
