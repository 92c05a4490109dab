"""``python -m benchmarks.scaling --rows N``: worker scaling and formats, side by side in one run.

Runs, alternated (``harness.alternate``), the re-shard of one CSV set with one process
(``--local-workers 1``), the default (every core), and Dask with 2 workers; two one-process runs at
once, each into its own folder (what two cores give to two independent copies of the work: the
ceiling the machine puts on any 2-worker speed-up, whatever the engine); then the same rows as
Parquet and JSON Lines (one process, against CSV one process). Reports wall and CPU seconds (each
run's process tree, Dask's workers included), MB/s per worker, CPU s per GB, the peak size of the
output folder over the final data set, pyarrow's single-thread CSV parse alone, whether every
contender wrote the same shards (crc32c), and issue 12's goals. ``make bench`` runs the same
comparison (``compare``) as part of its scaling section.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import shutil
import statistics
import sys
import threading
from collections.abc import Callable, Sequence

from benchmarks import data, harness

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


class _Folder:
    """A contender's output folder: emptied before each run (``prepare``), its size polled during
    the run, then checked (``check``): the peak size over the committed data set and the shards'
    crc32c, which every contender must share."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._peak, self._stop, self._thread = 0, threading.Event(), None

    def prepare(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
        self._peak, self._stop = 0, threading.Event()
        self._thread = threading.Thread(target=self._watch, args=(self._stop,), daemon=True)
        self._thread.start()

    def _watch(self, stop: threading.Event) -> None:
        while not stop.wait(0.05):
            self._peak = max(self._peak, _tree_bytes(self.path))

    def check(self, run: harness.Run) -> dict:
        self._stop.set()
        self._thread.join()
        with open(os.path.join(self.path, "manifest.json")) as f:
            manifest = json.load(f)
        shards = sorted((s["path"].split("/", 1)[1], s["crc32c"]) for split in manifest["splits"].values()
                        for s in split["shards"])
        final = _tree_bytes(self.path)
        return {"peak_over_final": round(max(self._peak, final) / final, 3), "final_mb": round(final / 1e6, 1),
                "shards_digest": hashlib.sha256(json.dumps(shards).encode()).hexdigest()[:16]}


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


def _parse_times(run: harness.Run) -> dict:
    """``Contender.check`` of the pyarrow parse (``_PARSE``): its CPU seconds on each pass."""
    first, second = map(float, run.extra["output"].split()[-2:])
    return {"first_pass": first, "second_pass": second}


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


class _Folders:
    """The output folders of copies run at once (``COPIES``): prepared and checked like one
    ``_Folder`` each; the copies must write the same shards."""

    def __init__(self, path: str, copies: int) -> None:
        self.folders = [_Folder(os.path.join(path, f"copy-{i}")) for i in range(copies)]

    def prepare(self) -> None:
        for folder in self.folders:
            folder.prepare()

    def check(self, run: harness.Run) -> dict:
        checks = [folder.check(run) for folder in self.folders]
        if len({c["shards_digest"] for c in checks}) != 1:
            raise RuntimeError(f"copies run at once wrote different shards: {checks}")
        return {**checks[0], "peak_over_final": max(c["peak_over_final"] for c in checks)}


CONTENDERS = {  # name: (input set, extra flags); "one_process" is the baseline of every ratio
    "one_process": ("csv", "--local-workers", "1"),
    "all_cores": ("csv",),
    "dask_2_workers": ("csv", "--runner", "dask", "--dask-workers", "2"),
    "two_at_once": ("csv", "--local-workers", "1"),
    "parquet_one_process": ("parquet", "--local-workers", "1"),
    "jsonl_one_process": ("jsonl", "--local-workers", "1"),
}
WORKERS = {"one_process": 1, "all_cores": len(os.sched_getaffinity(0)), "dask_2_workers": 2, "two_at_once": 2}
COPIES = {"two_at_once": 2}  # contenders that run this many copies at once (a ratio counts each copy's work)


def compare(rows: int, shards: int, repeats: int, *, names: Sequence[str] = tuple(CONTENDERS),
            unit_mb: str | None = None, log: Callable[[str], None] = print) -> dict:
    """Issue 12's comparison: the contenders ``names`` (``CONTENDERS``; one process always) on the
    same rows, alternated for ``repeats`` rounds (``harness.alternate``), with pyarrow's parse of
    the CSV files alone once per round (its fastest first pass is the reference); summaries
    (medians), ratios to one process (the median of the rounds' ratios), and issue 12's goals as
    ``benchmarks.run_all`` reports them."""
    folder = data.csv_set(rows)
    files = data.csv_files(folder)
    mb = data.dir_bytes(folder) / 1e6
    pq_glob, js_glob = _other_formats(folder)
    inputs = {"csv": os.path.join(folder, "*.csv"), "parquet": pq_glob, "jsonl": js_glob}
    # pyarrow's parse alone, first in every round like any contender: its first pass (fresh memory
    # for the tables) costs 2-4x its second here unless a parse just freed memory (0.9 s, then
    # run back to back), so it never runs right after itself
    contenders = [harness.Contender("pyarrow_parse", [sys.executable, "-c", _PARSE, *files], check=_parse_times)]
    for name in ["one_process", *(n for n in names if n != "one_process")]:
        kind, *extra = CONTENDERS[name]
        out = _Folders(os.path.join(WORK, name), COPIES[name]) if name in COPIES else _Folder(os.path.join(WORK, name))

        def command(folder: str, kind: str = kind, extra: list = extra) -> list[str]:
            return [sys.executable, "-m", "shardprep.run", "--input", inputs[kind], "--output", folder,
                    "--num-shards", str(shards), "--statistics", "off",  # auto depends on the input's bytes, which
                    *(("--unit-mb", unit_mb) if unit_mb else ()), *extra]  # differ by format

        if isinstance(out, _Folders):  # the copies at once, each into its own folder
            cmd = ["sh", "-c", " & ".join(shlex.join(command(f.path)) for f in out.folders) + "; wait"]
        else:
            cmd = command(out.path)
        contenders.append(harness.Contender(name, cmd, prepare=out.prepare, check=out.check))
    harness.warm([*files, *(os.path.join(os.path.dirname(g), f) for g in (pq_glob, js_glob)
                            for f in os.listdir(os.path.dirname(g)))])
    runs = harness.alternate(contenders, repeats, log=log)
    parse = [(r.extra["first_pass"], r.extra["second_pass"]) for r in runs.pop("pyarrow_parse")]
    shutil.rmtree(WORK, ignore_errors=True)
    base = runs["one_process"]
    summary = {}
    for name, rs in runs.items():
        s = harness.summarize(rs)
        workers, copies = WORKERS.get(name, 1), COPIES.get(name, 1)
        done = mb * copies  # the MB it re-sharded
        summary[name] = {**s, "workers": workers, "mb_per_s": round(done / s["wall_s"], 3),
                         "mb_per_s_per_worker": round(done / s["wall_s"] / workers, 1),
                         "cpu_s_per_gb": round(s["cpu_s"] / (done / 1000), 1),
                         "speedup": round(copies * harness.paired_ratio(base, rs), 3),  # throughput, per round
                         # the speed-up its CPU s allow with every worker's core busy all the run (per round)
                         "cpu_ceiling": round(statistics.median(copies * b.wall_s * workers / r.cpu_s
                                                                for b, r in zip(base, rs)), 2),
                         "peak_over_final": max(r.extra["peak_over_final"] for r in rs),
                         "same_shards": all(r.extra["shards_digest"] == base[0].extra["shards_digest"] for r in rs)}
    cold, warm = min(c for c, _ in parse), min(w for _, w in parse)
    one_cpu = summary["one_process"]["cpu_s"]
    out = {"rows": rows, "mb": round(mb, 1), "shards": shards, "summary": summary,
           "pyarrow_parse_cpu_s": {"first_pass": round(cold, 3), "second_pass": round(warm, 3)},
           "share_of_pyarrow_first_pass": round(cold / one_cpu, 3), "share_of_pyarrow_second_pass": round(warm / one_cpu, 3),
           "runs": {name: [r.to_json() for r in rs] for name, rs in runs.items()}}
    out["goals"] = _goals(out)
    return out


def _goals(result: dict) -> list[dict]:
    """Issue 12's goals, from ``compare``'s result (those of the contenders it ran)."""
    s, goal = result["summary"], harness.goal
    goals = []
    if "all_cores" in s:
        goals.append(goal(f"every core ({s['all_cores']['workers']}) vs one process (wall-time speed-up)",
                          s["all_cores"]["speedup"], 1.7))
    if "dask_2_workers" in s:
        goals.append(goal("Dask, 2 workers (own local cluster) vs one process (wall-time speed-up)",
                          s["dask_2_workers"]["speedup"], 1.6))
    if "two_at_once" in s:  # the machine's ceiling: what it gives two independent copies of the work at once
        for name, label, target in (("all_cores", "every core (the default)", 0.95),
                                    ("dask_2_workers", "Dask, 2 workers", 0.85)):
            if name in s:
                goals.append(goal(f"{label}: MB/s / two one-process runs at once (the machine's ceiling)",
                                  s[name]["mb_per_s"] / s["two_at_once"]["mb_per_s"], target))
    goals.append(goal("one process: share of pyarrow's single-thread CSV parse rate (per CPU s, first pass)",
                      100 * result["share_of_pyarrow_first_pass"], 40, unit="%"))
    for kind in ("parquet", "jsonl"):
        if f"{kind}_one_process" in s:
            goals.append(goal(f"{'Parquet' if kind == 'parquet' else 'JSON Lines'} time / CSV time (one process)",
                              1 / s[f"{kind}_one_process"]["speedup"], 1.2, at_least=False))
    goals.append(goal("peak output folder / committed data set", max(v["peak_over_final"] for v in s.values()), 2.1,
                      at_least=False))
    goals.append(goal("contenders whose shards differ from one process's (crc32c)",
                      sum(not v["same_shards"] for v in s.values()), 0, at_least=False, unit=""))
    return goals


def table(result: dict) -> list[str]:
    """``compare``'s result as markdown lines: the scaling table of BENCHMARKS.md."""
    lines = ["| run | workers | wall s (median) | vs one process | its CPU's ceiling | MB/s | MB/s per worker | CPU s | "
             "CPU s per GB | peak folder / data set | same shards |",
             "|:---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, v in result["summary"].items():
        ceiling = f"{v['cpu_ceiling']:.2f}x" if "cpu_ceiling" in v else "-"
        lines.append(f"| {LABELS.get(name, name)} | {v['workers']} | {v['wall_s']:.2f} | {v['speedup']:.2f}x | {ceiling} | "
                     f"{v['mb_per_s']:.1f} | {v['mb_per_s_per_worker']:.1f} | {v['cpu_s']:.1f} | {v['cpu_s_per_gb']:.0f} | "
                     f"{v['peak_over_final']:.2f}x | {'yes' if v['same_shards'] else '**no**'} |")
    return lines


LABELS = {"one_process": "CSV, one process (`--local-workers 1`)", "all_cores": "CSV, every core (the default)",
          "dask_2_workers": "CSV, Dask, 2 workers (`--runner dask`)",
          "two_at_once": "CSV, two one-process runs at once (the machine's ceiling)", "parquet_one_process": "Parquet, one process",
          "jsonl_one_process": "JSON Lines, one process"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.scaling", description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=400_000)
    ap.add_argument("--shards", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--unit-mb", help="--unit-mb of every run (default: none, the product's default: the input / 16, "
                    "16-64 MiB)")
    ap.add_argument("--skip-dask", action="store_true")
    ap.add_argument("--only", default="", help=f"contenders to run, comma-separated, among {', '.join(CONTENDERS)}; "
                    "one_process always runs, as the baseline")
    args = ap.parse_args(argv)
    names = [n.strip() for n in args.only.split(",") if n.strip()] or list(CONTENDERS)
    unknown = [n for n in names if n not in CONTENDERS]
    if unknown:
        ap.error(f"--only {','.join(unknown)}: expected among {', '.join(CONTENDERS)}")
    if args.skip_dask:
        names = [n for n in names if n != "dask_2_workers"]
    result = compare(args.rows, args.shards, args.rounds, names=names, unit_mb=args.unit_mb,
                     log=lambda line: print(line, file=sys.stderr, flush=True))
    p = result["pyarrow_parse_cpu_s"]
    print(f"CSV: {args.rows:,} rows, {result['mb']:.0f} MB in 3 files; {args.shards} shards; --unit-mb "
          f"{args.unit_mb or 'default'}; medians of {args.rounds} alternated rounds, ratios the median of the rounds' "
          f"ratios; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs at the end; pyarrow's CSV parse "
          f"alone (1 thread, a fresh process): {result['mb'] / p['first_pass']:.0f} MB per CPU s on its first pass, "
          f"{result['mb'] / p['second_pass']:.0f} on a second pass\n")
    print("\n".join(table(result)))
    print()
    for g in result["goals"]:
        print(f"- {g['goal']}: {g['value']:.3g}{g['unit']} ({'>=' if g['at_least'] else '<='} {g['target']}{g['unit']}): "
              f"{'met' if g['met'] else 'NOT MET'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
