"""What ``--statistics on`` costs (issue 36): one CSV (about ``--mb`` MB: floats, ints, strings of a
few thousand values, a high-cardinality id) re-sharded with statistics off and on, and a TFDV-style
contender on the same records: each Example decoded (the same decoder) and every value fed to
per-feature Python accumulators (count, min, max, sums, zeros, a Counter per string feature, the
numbers kept for numpy's exact percentiles at the end).

    python -m benchmarks.stats_cost --mb 50
"""
from __future__ import annotations

import argparse
import math
import random
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

from shardprep import manifest, run, tfrecord
from shardprep.example.decoder import decode_example


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


def reshard(src: Path, out: Path, statistics: str) -> float:
    start = time.perf_counter()
    assert run.main(["--input", str(src), "--output", str(out), "--num-shards", "8", "--statistics", statistics]) == 0
    return time.perf_counter() - start


def contender(out: Path) -> tuple[float, int]:
    """Per record, per value Python accumulation (how a TFDV-style Python generator would do it)."""
    m = manifest.load(str(out))
    paths = [out / s.path for sp in m.splits.values() for s in sp.shards]
    start = time.perf_counter()
    acc: dict[str, dict] = {}
    records = 0
    for path in paths:
        with open(path, "rb") as f:
            for record in tfrecord.read_records(f, check_crc=False):
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
    for a in acc.values():  # the end: exact percentiles and histograms of the kept numbers
        if a["values"]:
            x = np.asarray(a["values"])
            np.percentile(x, [1, 5, 25, 50, 75, 95, 99])
            np.histogram(x, 10)
    return time.perf_counter() - start, records


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mb", type=float, default=50.0, help="size of the CSV (default: 50)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "in.csv"
        rows = write_csv(src, args.mb)
        off = reshard(src, Path(tmp) / "off", "off")
        on = reshard(src, Path(tmp) / "on", "on")
        python, records = contender(Path(tmp) / "on")
    stats_cost = on - off
    print(f"{rows:,} rows, {args.mb:g} MB of CSV")
    print(f"re-shard, --statistics off: {off:.2f} s")
    print(f"re-shard, --statistics on:  {on:.2f} s  (x{on / off:.2f}; statistics {stats_cost:.2f} s, "
          f"{stats_cost / rows * 1e6:.2f} us/record)")
    print(f"TFDV-style per-record Python, {records:,} records: {python:.2f} s ({python / records * 1e6:.2f} us/record; "
          f"x{python / max(stats_cost, 1e-9):.1f} the statistics' own cost, x{python / off:.2f} the whole re-shard)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
