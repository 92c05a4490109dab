"""What ``--statistics on`` (the default) costs (issue 36), side by side in one run:

- a CSV (about ``--mb`` MB: floats, ints, strings of a few thousand values, a high-cardinality id)
  and a TFRecord input (about ``--tfrecord-mb`` MB: the records of a smaller CSV of the same kind,
  as a stats-off run wrote them; an Example takes ~2.8x its CSV line), each re-sharded with statistics off and on, in one process (``--local-workers 1``) and by default;
- a TFDV-style contender on the same records: each Example decoded in Python (``example.decoder``,
  no protobuf) and every value fed to per-feature Python accumulators (count, min, max, sums,
  zeros, a Counter per string feature, the numbers kept for numpy's exact percentiles at the end),
  on the first ``--contender-records`` records;
- ``--wide C``: a wide table's cost per column (C numeric columns of 20 rows: the column-wise
  encoding of the batch beside its statistics from the columns, from the compiled reader, and the
  split's ``to_json``);
- ``--distinct N``: the statistics' memory for one id column of N distinct strings, fed as Parse
  feeds it (column batches of 65,536 rows into one partial), Python and numpy (tracemalloc) and
  Arrow's pool at their peak.

Each re-shard's wall time and CPU time (this process's and its ended children's: the worker
processes) are kept, the fastest of ``--repeat`` runs each; on a machine shared with other work the
CPU seconds are the steadier figure.

    python -m benchmarks.stats_cost --mb 150 --tfrecord-mb 100 --repeat 3 --wide 50000 --distinct 10000000
"""
from __future__ import annotations

import argparse
import glob
import math
import pickle
import random
import resource
import tempfile
import time
import tracemalloc
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa

from shardprep import framing, manifest, run
from shardprep.example.decoder import decode_example
from shardprep.schema import FeatureSpec
from shardprep.stats import columns as stats_columns


def write_csv(path: Path, mb: float, seed: int = 0) -> int:
    rng = random.Random(seed)
    cities = [f"city{i}" for i in range(3000)]
    rows, size = 0, 0
    with open(path, "w") as f:
        header = "price,qty,ratio,city,id\n"
        f.write(header)
        size += len(header)
        while size < mb * 1e6:
            chunk = "".join(f"{rng.lognormvariate(3, 1.5):.4f},{rng.randrange(0, 500)},{rng.gauss(0, 1):.6f},"
                            f"{rng.choice(cities)},u{rng.randrange(10**12)}\n" for _ in range(10_000))
            f.write(chunk)
            size += len(chunk)
            rows += 10_000
    return rows


def _cpu() -> float:
    """CPU seconds of this process and of its children that have ended (the worker processes)."""
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


def reshard(inputs: list[str], out: Path, statistics: str, workers: int | None) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one run."""
    start, cpu = time.perf_counter(), _cpu()
    argv = [arg for path in inputs for arg in ("--input", path)]
    argv += ["--output", str(out), "--num-shards", "8", "--statistics", statistics, "--overwrite"]
    argv += ["--local-workers", str(workers)] if workers else []
    assert run.main(argv) == 0
    return time.perf_counter() - start, _cpu() - cpu


def contender(out: Path, limit: int) -> tuple[float, int]:
    """Per record, per value Python accumulation (how a TFDV-style Python generator would do it)."""
    m = manifest.load(str(out))
    paths = [out / s.path for sp in m.splits.values() for s in sp.shards]
    start = time.perf_counter()
    acc: dict[str, dict] = {}
    records = 0
    for path in paths:
        with open(path, "rb") as f:
            for record in framing.read_records(f, check_crc=False):
                records += 1
                for name, values in decode_example(record).items():
                    a = acc.setdefault(name, {"count": 0, "values": [], "min": math.inf, "max": -math.inf, "sum": 0.0,
                                              "squares": 0.0, "zeros": 0, "strings": Counter()})
                    a["count"] += 1
                    for v in values:
                        if isinstance(v, bytes):
                            a["strings"][v] += 1
                        else:
                            a["values"].append(v)
                            a["min"], a["max"] = min(a["min"], v), max(a["max"], v)
                            a["sum"] += v
                            a["squares"] += v * v
                            a["zeros"] += v == 0
                if records >= limit:
                    break
        if records >= limit:
            break
    for a in acc.values():  # the end: exact percentiles and histograms of the kept numbers
        if a["values"]:
            x = np.asarray(a["values"])
            np.percentile(x, [1, 5, 25, 50, 75, 95, 99])
            np.histogram(x, 10)
    return time.perf_counter() - start, records


def distinct_memory(n: int, batch: int = 1 << 16) -> tuple[int, int, int, int]:
    """(Python + numpy peak bytes, Arrow pool peak bytes, pickled partial bytes, distinct estimate) for
    one string column of ``n`` distinct ids added batch by batch into one partial."""
    features = {"id": FeatureSpec("string")}
    partial: dict = {}
    tracemalloc.start()
    arrow_peak = 0
    for lo in range(0, n, batch):
        ids = np.arange(lo, min(n, lo + batch))
        values = pa.array(np.char.add("user-", ids.astype(str)).astype(object), pa.string()).cast(pa.binary())
        stats_columns.add(partial, {"id": stats_columns.Column(values)}, features, len(ids))
        arrow_peak = max(arrow_peak, pa.total_allocated_bytes())
        del values
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    s = partial["id"]
    return peak, arrow_peak, len(pickle.dumps(partial)), s.hll.estimate() if s.hll is not None else len(s.counts)


def wide_cost(columns: int, rows: int = 20) -> dict[str, float]:
    """Seconds for one batch of ``columns`` numeric columns (a third int64) of ``rows`` rows."""
    from shardprep.example import columnar
    from shardprep.stats import feature_stats
    features = {f"f{i:05d}": FeatureSpec("int64" if i % 3 == 0 else "float32") for i in range(columns)}
    rng = np.random.default_rng(0)
    data = {name: rng.integers(0, 100, rows) if spec.dtype == "int64" else rng.normal(size=rows).astype(np.float32)
            for name, spec in features.items()}
    t0 = time.perf_counter()
    batch = next(iter(columnar.framed_batches(features, data, rows)))
    t1 = time.perf_counter()
    partial: dict = {}
    stats_columns.add(partial, stats_columns.from_columnar(batch.columns, features), features, rows)
    t2 = time.perf_counter()
    stats_columns.add({}, stats_columns.from_examples(batch.blob, batch.ends, features), features, rows)
    t3 = time.perf_counter()
    feature_stats.to_json(partial, features)
    t4 = time.perf_counter()
    return {"encode": t1 - t0, "columns": t2 - t1, "compiled": t3 - t2, "to_json": t4 - t3}


def _line(name: str, off: float, on: float, rows: int, cpu: tuple[float, float] | None = None) -> str:
    line = (f"{name}: off {off:6.2f} s, on {on:6.2f} s (x{on / off:.3f}, +{100 * (on - off) / off:4.1f}%; "
            f"statistics {(on - off) / rows * 1e6:5.2f} us/record)")
    if cpu:
        line += f"; CPU off {cpu[0]:6.2f} s, on {cpu[1]:6.2f} s (+{100 * (cpu[1] - cpu[0]) / cpu[0]:4.1f}%)"
    return line


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mb", type=float, default=50.0, help="size of the CSV (default: 50)")
    p.add_argument("--contender-records", type=int, default=200_000, help="records the contender reads (default: 200000)")
    p.add_argument("--repeat", type=int, default=1, help="runs of each, the fastest kept (default: 1)")
    p.add_argument("--wide", type=int, default=0, help="also measure a wide table of this many columns (20 rows)")
    p.add_argument("--distinct", type=int, default=0, help="also measure an id column of this many distinct strings")
    p.add_argument("--tfrecord-mb", type=float, default=0.0, help="size of the TFRecord input (default: none)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "in.csv"
        rows = write_csv(src, args.mb)
        tf_rows = 0
        inputs = {"csv": [str(src)]}
        times: dict[tuple[str, str], dict[str, float]] = {}
        cpus: dict[tuple[str, str], dict[str, float]] = {}
        if args.tfrecord_mb:
            tf_src = Path(tmp) / "tf.csv"
            tf_rows = write_csv(tf_src, args.tfrecord_mb / 2.8, seed=1)
            reshard([str(tf_src)], Path(tmp) / "tf-made", "off", None)  # (wall, CPU) not kept
            inputs["tfrecord"] = sorted(glob.glob(str(Path(tmp) / "tf-made" / "*" / "*" / "*.tfrecord*")))
        for fmt in inputs:
            for workers, label in ((1, "1"), (None, "default")):
                runs: dict[str, list[tuple[float, float]]] = {"off": [], "on": []}
                for _ in range(args.repeat):  # off and on alternate: a load that comes and goes hits both
                    for s in runs:
                        runs[s].append(reshard(inputs[fmt], Path(tmp) / f"{fmt}-{label}-{s}", s, workers))
                times[fmt, label] = {s: min(w for w, _ in t) for s, t in runs.items()}  # the fastest of each
                cpus[fmt, label] = {s: min(c for _, c in t) for s, t in runs.items()}
        python, records = contender(Path(tmp) / "csv-1-on", args.contender_records)
        tf_mb = sum(Path(s).stat().st_size for s in inputs.get("tfrecord", [])) / 1e6
    print(f"{rows:,} rows, {args.mb:g} MB of CSV" + (f"; {tf_rows:,} records, {tf_mb:.0f} MB of TFRecord" if tf_mb else ""))
    for (fmt, label), t in times.items():
        print(_line(f"{fmt:8s} --local-workers {label:7s}", t["off"], t["on"], rows if fmt == "csv" else tf_rows,
                    (cpus[fmt, label]["off"], cpus[fmt, label]["on"])))
    per_record = python / records
    one = times["csv", "1"]
    own = max(one["on"] - one["off"], 1e-9) / rows
    print(f"TFDV-style per-record Python, {records:,} records: {per_record * 1e6:.2f} us/record "
          f"(x{per_record / own:.1f} the statistics' own cost in one process, "
          f"x{per_record * rows / one['off']:.2f} the whole one-process re-shard)")
    if args.wide:
        w = wide_cost(args.wide)
        print(f"wide table, {args.wide:,} columns x 20 rows: encoding {w['encode']:.2f} s; statistics from the columns "
              f"{w['columns']:.2f} s, from the compiled reader {w['compiled']:.2f} s, to_json {w['to_json']:.2f} s "
              f"({(w['columns'] + w['to_json']) / args.wide * 1e6:.0f} us/column)")
    if args.distinct:
        peak, arrow, pickled, estimate = distinct_memory(args.distinct)
        print(f"id column of {args.distinct:,} distinct strings: statistics peak {peak / 2**20:.1f} MiB Python+numpy, "
              f"{arrow / 2**20:.1f} MiB Arrow pool; partial pickled {pickled / 1024:.0f} KiB; distinct ~{estimate:,}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
