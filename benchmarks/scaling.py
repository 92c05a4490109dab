"""``python -m benchmarks.scaling --rows N``: worker scaling and formats, side by side in one run.

Runs, round-robin, the re-shard of one CSV set with one process (``--local-workers 1``), the
default (every core), and Dask with 2 workers; then the same rows as Parquet and JSON Lines (one
process, against CSV one process). Reports wall and CPU seconds (this process's children, Dask's
workers included), MB/s per worker, CPU s per GB, the peak size of the output folder over the final
data set, pyarrow's single-thread CSV parse alone, and whether every contender wrote the same
shards (crc32c). Prints a markdown table for BENCHMARKS.md.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import threading
import time

from benchmarks import data

WORK = os.path.join(data.DATA_DIR, "work", "scaling")


def _tree_bytes(folder: str) -> int:
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except OSError:
                pass
    return total


def _run(name: str, inputs: str, shards: int, *extra: str) -> dict:
    out = os.path.join(WORK, name)
    shutil.rmtree(out, ignore_errors=True)
    peak, stop = [0], threading.Event()

    def watch() -> None:
        while not stop.wait(0.05):
            peak[0] = max(peak[0], _tree_bytes(out))

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "shardprep.run", "--input", inputs, "--output", out,
                           "--num-shards", str(shards), *extra], capture_output=True, text=True)
    wall = time.perf_counter() - start
    stop.set()
    thread.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        raise SystemExit(f"{name} failed:\n{proc.stderr[-3000:]}")
    manifest = json.load(open(os.path.join(out, "manifest.json")))
    shards_ = [(s["path"].split("/", 1)[1], s["crc32c"]) for sp in manifest["splits"].values() for s in sp["shards"]]
    final = _tree_bytes(out)
    return {"wall_s": wall, "cpu_s": (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime),
            "peak_over_final": peak[0] / final, "final_mb": final / 1e6, "shards": sorted(shards_)}


_PARSE = """
import sys, time
import pyarrow.csv as pacsv
times = []
for _ in range(2):  # a fresh process's first pass (cold), then the same files again (warm)
    start = time.process_time()  # CPU seconds: one thread, so as good as wall time on a quiet machine
    for path in sys.argv[1:]:
        pacsv.read_csv(path, read_options=pacsv.ReadOptions(use_threads=False))
    times.append(time.process_time() - start)
print(*times)
"""


def _pyarrow_parse(files: list[str]) -> tuple[float, float]:
    """CPU seconds of pyarrow's single-thread parse of ``files`` in a fresh process: its first pass
    (cold: fresh memory for the tables, as a run's own parse gets) and a second pass (warm)."""
    out = subprocess.run([sys.executable, "-c", _PARSE, *files], capture_output=True, text=True, check=True)
    cold, warm = map(float, out.stdout.split())
    return cold, warm


def _other_formats(folder: str) -> tuple[str, str]:
    """The CSV set's rows as one Parquet and one JSON Lines file (same rows, same order)."""
    import orjson
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    pq_dir, js_dir = folder + "-parquet", folder + "-jsonl"
    if not os.path.isdir(pq_dir) or not os.path.isdir(js_dir):
        table = pa.concat_tables([pacsv.read_csv(p) for p in data.csv_files(folder)])
        for d in (pq_dir, js_dir):
            shutil.rmtree(d, ignore_errors=True)
            os.makedirs(d)
        pq.write_table(table, os.path.join(pq_dir, "rows.parquet"), row_group_size=64_000)
        with open(os.path.join(js_dir, "rows.jsonl"), "wb") as f:
            for batch in table.to_batches(50_000):
                f.write(b"".join(orjson.dumps(row) + b"\n" for row in batch.to_pylist()))
    return os.path.join(pq_dir, "*.parquet"), os.path.join(js_dir, "*.jsonl")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.scaling")
    ap.add_argument("--rows", type=int, default=400_000)
    ap.add_argument("--shards", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--unit-mb", help="--unit-mb of every run (default: none, the product's default: the input / 16, "
                    "16-64 MiB)")
    ap.add_argument("--skip-dask", action="store_true")
    ap.add_argument("--only", default="", help="contenders to run, separated by '|' (e.g. 'dask, 2 workers'); "
                    "'one process' always runs, as the baseline")
    args = ap.parse_args(argv)
    folder = data.csv_set(args.rows)
    csv_glob = os.path.join(folder, "*.csv")
    mb = data.dir_bytes(folder) / 1e6
    pq_glob, js_glob = _other_formats(folder)
    contenders = {"one process": (csv_glob, "--local-workers", "1"), "default (all cores)": (csv_glob,)}
    if not args.skip_dask:
        contenders["dask, 2 workers"] = (csv_glob, "--runner", "dask", "--dask-workers", "2")
    contenders["parquet, one process"] = (pq_glob, "--local-workers", "1")
    contenders["jsonl, one process"] = (js_glob, "--local-workers", "1")
    if args.only:
        wanted = {"one process", *(name.strip() for name in args.only.split("|"))}
        contenders = {name: spec for name, spec in contenders.items() if name in wanted}
    results: dict[str, list[dict]] = {name: [] for name in contenders}
    parse_s = []
    for _ in range(args.rounds):
        parse_s.append(_pyarrow_parse(data.csv_files(folder)))
        for name, (inputs, *extra) in contenders.items():
            units = ("--unit-mb", args.unit_mb) if args.unit_mb else ()
            results[name].append(_run(name.replace(" ", "_").replace(",", ""), inputs, args.shards, *units, *extra))
            print(f"[scaling] {name}: {results[name][-1]['wall_s']:.1f} s", file=sys.stderr, flush=True)
    best = {name: min(rs, key=lambda r: r["wall_s"]) for name, rs in results.items()}
    base = best["one process"]
    workers = {"one process": 1, "default (all cores)": len(os.sched_getaffinity(0)), "dask, 2 workers": 2}
    load = os.getloadavg()[0]
    print(f"CSV: {args.rows:,} rows, {mb:.0f} MB in 3 files; {args.shards} shards; --unit-mb {args.unit_mb or 'default'}; "
          f"best of {args.rounds}; load average {load:.1f} on {os.cpu_count()} CPUs at the end; "
          f"pyarrow CSV parse alone (1 thread, a fresh process): {mb / min(c for c, _ in parse_s):.0f} MB per CPU s "
          f"on its first pass, {mb / min(w for _, w in parse_s):.0f} on a second pass of the same files\n")
    print("| run | wall s | vs one process | MB/s | MB/s per worker | CPU s | CPU s per GB | peak folder / data set | same shards |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, r in best.items():
        w = workers.get(name, 1)
        print(f"| {name} | {r['wall_s']:.1f} | {base['wall_s'] / r['wall_s']:.2f}x | {mb / r['wall_s']:.1f} | "
              f"{mb / r['wall_s'] / w:.1f} | {r['cpu_s']:.1f} | {r['cpu_s'] / (mb / 1000):.0f} | "
              f"{r['peak_over_final']:.2f}x | {'yes' if r['shards'] == base['shards'] else 'NO'} |")
    cold, warm = min(c for c, _ in parse_s), min(w for _, w in parse_s)
    print(f"\none process: {cold / base['cpu_s'] * 100:.0f}% of pyarrow's single-thread parse throughput on its first "
          f"pass, {warm / base['cpu_s'] * 100:.0f}% of its second (per CPU second; "
          f"{cold / base['wall_s'] * 100:.0f}% and {warm / base['wall_s'] * 100:.0f}% in wall time)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
