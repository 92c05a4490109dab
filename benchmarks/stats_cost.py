"""What ``--statistics on`` (the default) costs (issue 36), side by side in one run:

- ``--shape default``: a CSV (about ``--mb`` MB: floats, ints, strings of a few thousand values, a
  high-cardinality id) and a TFRecord input (about ``--tfrecord-mb`` MB: the records of a smaller
  CSV of the same kind, as a stats-off run wrote them; an Example takes ~2.8x its CSV line), each
  re-sharded with statistics off and on, in one process (``--local-workers 1``) and by default
  (``--modes``);
- ``--shape strings`` (issue 61): ``--rows`` rows (1.2M: ~530 MB) of an id, 8 floats, a label and a
  free text of ~400 bytes, in three uneven CSV files; ``--shape bytes``: ``--bytes-mb`` (300) of
  TFRecord pass-through whose Examples carry bytes features (a label, a ~400-byte text, a payload
  of 300 to 900 random bytes) beside an id and 4 floats, in three uneven files; both re-sharded as
  the issue measured them (``ISSUE_61``: 64 shards, two splits);
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
    python -m benchmarks.stats_cost --shape strings --shape bytes --modes default --repeat 4
    python -m benchmarks.stats_cost --shape strings --shape bytes --rows 60000 --bytes-mb 15   # a quick run
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


SHARES = (0.55, 0.3, 0.15)  # the string and bytes shapes' input files: three, uneven


def _texts(rng: np.random.Generator, n: int, mean: int = 370) -> tuple[np.ndarray, bytes]:
    """``n`` free texts of about ``mean`` bytes (``mean - 70`` to ``mean + 70``: words of a Zipf-like
    vocabulary of 20,000, each text ending in a full stop) as a column's (int64 offsets, data)."""
    letters = np.frombuffer(b"etaoinshrdlcumwfgypbvkjxqz", np.uint8)
    sizes = rng.integers(2, 11, 20_000)
    vocab = [letters[rng.integers(0, 26, k)].tobytes() for k in sizes]
    weights = 1.0 / np.arange(1, 20_001)
    words = rng.choice(20_000, size=n * (mean // 5 + 30), p=weights / weights.sum())
    data = np.frombuffer(b" ".join(vocab[w] for w in words.tolist()) + b" ", np.uint8).copy()
    spaces = np.flatnonzero(data == 32)
    cuts = np.searchsorted(spaces, np.cumsum(rng.integers(mean - 70, mean + 71, n)))  # a row's end: the next space
    if cuts[-1] >= spaces.size:
        raise ValueError("too few words for the texts")
    ends = spaces[cuts]
    data[ends] = ord(".")
    offsets = np.concatenate(([0], ends + 1)).astype(np.int64)
    return offsets, data[:offsets[-1]].tobytes()


def write_strings_csv(folder: Path, rows: int, seed: int = 0) -> list[str]:
    """The issue 61 table: ``rows`` rows of an id, 8 floats, a label and a free text of ~400 bytes
    (~440 bytes a row), in three uneven CSV files (``SHARES``)."""
    import pyarrow.csv as pacsv

    rng = np.random.default_rng(seed)
    labels = np.array(["spam", "ham", "news", "sport", "other"])
    paths, start = [], 0
    for k, share in enumerate(SHARES):
        n = rows - start if k == len(SHARES) - 1 else round(rows * share)
        path = folder / f"strings-{k}.csv"
        with pacsv.CSVWriter(str(path), pa.schema([("id", pa.int64()), *((f"x{j}", pa.float64()) for j in range(8)),
                                                   ("label", pa.string()), ("text", pa.string())]),
                             write_options=pacsv.WriteOptions(quoting_style="needed")) as out:
            for lo in range(start, start + n, 100_000):
                m = min(100_000, start + n - lo)
                offsets, data = _texts(rng, m)
                text = pa.Array.from_buffers(pa.string(), m, [None, pa.py_buffer(offsets.astype(np.int32)),
                                                              pa.py_buffer(data)])
                floats = [np.round(rng.normal(0, 10 ** (j % 4), m), 3) for j in range(8)]
                out.write(pa.record_batch([pa.array(np.arange(lo, lo + m)), *map(pa.array, floats),
                                           pa.array(labels[rng.integers(0, 5, m)]), text],
                                          names=["id", *(f"x{j}" for j in range(8)), "label", "text"]))
        paths.append(str(path))
        start += n
    return paths


def write_bytes_tfrecords(folder: Path, mb: float, seed: int = 0) -> tuple[list[str], int]:
    """A TFRecord pass-through set of about ``mb`` MB whose Examples carry bytes features: an id, 4
    floats, a label, a text of ~400 bytes and a payload of 300 to 900 random bytes (a thumbnail's,
    an embedding's: every value distinct), in three uneven files (``SHARES``); and its records."""
    from shardprep.example import columnar

    rng = np.random.default_rng(seed)
    schema = {"id": FeatureSpec("int64"), **{f"x{j}": FeatureSpec("float32") for j in range(4)},
              "label": FeatureSpec("string"), "text": FeatureSpec("string"), "payload": FeatureSpec("string")}
    labels = [b"spam", b"ham", b"news", b"sport", b"other"]
    total, records = int(mb * 1e6), 0
    paths = []
    for k, share in enumerate(SHARES):
        path, size = folder / f"bytes-{k}.tfrecord", 0
        with open(path, "wb") as f:
            while size < total * share:
                m = int(min(20_000, max(1000, (total * share - size) / 1100)))
                label = rng.integers(0, 5, m)
                label_sizes = np.array([len(labels[i]) for i in label.tolist()])
                payload_sizes = rng.integers(300, 901, m)
                columns = {"id": np.arange(records, records + m), **{f"x{j}": rng.normal(size=m).astype(np.float32)
                                                                    for j in range(4)},
                           "label": (np.concatenate(([0], np.cumsum(label_sizes))), b"".join(labels[i] for i in label.tolist())),
                           "text": _texts(rng, m),
                           "payload": (np.concatenate(([0], np.cumsum(payload_sizes))),
                                       rng.integers(0, 256, int(payload_sizes.sum()), np.uint8).tobytes())}
                blob, _ = columnar.encode_framed(schema, columns, m)
                f.write(blob)
                size += len(blob)
                records += m
        paths.append(str(path))
    return paths, records


def _cpu() -> float:
    """CPU seconds of this process and of its children that have ended (the worker processes)."""
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


ISSUE_61 = ("--num-shards", "64", "--seed", "1", "--split", "train=0.9,eval=0.1")  # the string and bytes shapes' runs


def reshard(inputs: list[str], out: Path, statistics: str, workers: int | None,
            extra: tuple[str, ...] = ("--num-shards", "8")) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one run."""
    start, cpu = time.perf_counter(), _cpu()
    argv = [arg for path in inputs for arg in ("--input", path)]
    argv += ["--output", str(out), *extra, "--statistics", statistics, "--overwrite"]
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


def _measured(inputs: list[str], tmp: Path, name: str, modes: list[str], repeat: int,
              extra: tuple[str, ...]) -> dict[str, dict[str, tuple[float, float]]]:
    """Per process mode, the fastest (wall, CPU) of ``repeat`` runs with statistics off and on,
    alternated (a load that comes and goes hits both)."""
    out = {}
    for label in modes:
        runs: dict[str, list[tuple[float, float]]] = {"off": [], "on": []}
        for _ in range(repeat):
            for s in runs:
                runs[s].append(reshard(inputs, tmp / f"{name}-{label}-{s}", s, 1 if label == "1" else None, extra))
        out[label] = {s: (min(w for w, _ in t), min(c for _, c in t)) for s, t in runs.items()}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", action="append", choices=("default", "strings", "bytes"),
                   help="tables measured (repeat for several; default: default): default (--mb's CSV, "
                        "--tfrecord-mb's TFRecord, the contender), strings (--rows of a ~400-byte text), "
                        "bytes (--bytes-mb of Examples with bytes features)")
    p.add_argument("--mb", type=float, default=50.0, help="size of the CSV (default: 50)")
    p.add_argument("--rows", type=int, default=1_200_000, help="rows of the strings shape's CSV (default: 1200000)")
    p.add_argument("--bytes-mb", type=float, default=300.0, help="size of the bytes shape's TFRecords (default: 300)")
    p.add_argument("--modes", default="1,default",
                   help="process counts measured: 1 (--local-workers 1), default, or both (default: 1,default)")
    p.add_argument("--contender-records", type=int, default=200_000, help="records the contender reads (default: 200000)")
    p.add_argument("--repeat", type=int, default=1, help="runs of each, the fastest kept (default: 1)")
    p.add_argument("--wide", type=int, default=0, help="also measure a wide table of this many columns (20 rows)")
    p.add_argument("--distinct", type=int, default=0, help="also measure an id column of this many distinct strings")
    p.add_argument("--tfrecord-mb", type=float, default=0.0, help="size of the TFRecord input (default: none)")
    args = p.parse_args(argv)
    shapes, modes = args.shape or ["default"], [m for m in args.modes.split(",") if m]
    if not modes or set(modes) - {"1", "default"}:
        p.error(f"--modes {args.modes!r}: expected 1, default or 1,default")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        if "default" in shapes:
            _default_shape(args, folder, modes)
        if "strings" in shapes:
            paths = write_strings_csv(folder, args.rows)
            mb = sum(Path(path).stat().st_size for path in paths) / 1e6
            print(f"strings: {args.rows:,} rows, {mb:.0f} MB of CSV in {len(paths)} files (an id, 8 floats, a label, "
                  f"a ~400-byte text); {' '.join(ISSUE_61)}")
            for label, t in _measured(paths, folder, "strings", modes, args.repeat, ISSUE_61).items():
                print(_line(f"strings  --local-workers {label:7s}", t["off"][0], t["on"][0], args.rows,
                            (t["off"][1], t["on"][1])))
            for path in paths:
                Path(path).unlink()
        if "bytes" in shapes:
            paths, records = write_bytes_tfrecords(folder, args.bytes_mb)
            mb = sum(Path(path).stat().st_size for path in paths) / 1e6
            print(f"bytes: {records:,} records, {mb:.0f} MB of TFRecord in {len(paths)} files (an id, 4 floats, a label, "
                  f"a ~400-byte text, a 300-900 byte payload); {' '.join(ISSUE_61)}")
            for label, t in _measured(paths, folder, "bytes", modes, args.repeat, ISSUE_61).items():
                print(_line(f"bytes    --local-workers {label:7s}", t["off"][0], t["on"][0], records,
                            (t["off"][1], t["on"][1])))
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


def _default_shape(args: argparse.Namespace, tmp: Path, modes: list[str]) -> None:
    """The benchmark's own tables: ``--mb`` of CSV, ``--tfrecord-mb`` of TFRecord, and the contender."""
    src = tmp / "in.csv"
    rows = write_csv(src, args.mb)
    tf_rows = 0
    inputs = {"csv": [str(src)]}
    if args.tfrecord_mb:
        tf_src = tmp / "tf.csv"
        tf_rows = write_csv(tf_src, args.tfrecord_mb / 2.8, seed=1)
        reshard([str(tf_src)], tmp / "tf-made", "off", None)  # (wall, CPU) not kept
        inputs["tfrecord"] = sorted(glob.glob(str(tmp / "tf-made" / "*" / "*" / "*.tfrecord*")))
    measured = {fmt: _measured(paths, tmp, fmt, modes, args.repeat, ("--num-shards", "8")) for fmt, paths in inputs.items()}
    tf_mb = sum(Path(s).stat().st_size for s in inputs.get("tfrecord", [])) / 1e6
    print(f"{rows:,} rows, {args.mb:g} MB of CSV" + (f"; {tf_rows:,} records, {tf_mb:.0f} MB of TFRecord" if tf_mb else ""))
    for fmt, per_mode in measured.items():
        for label, t in per_mode.items():
            print(_line(f"{fmt:8s} --local-workers {label:7s}", t["off"][0], t["on"][0], rows if fmt == "csv" else tf_rows,
                        (t["off"][1], t["on"][1])))
    if "1" not in modes:
        return
    python, records = contender(tmp / "csv-1-on", args.contender_records)
    per_record = python / records
    one = {s: w for s, (w, _) in measured["csv"]["1"].items()}
    own = max(one["on"] - one["off"], 1e-9) / rows
    print(f"TFDV-style per-record Python, {records:,} records: {per_record * 1e6:.2f} us/record "
          f"(x{per_record / own:.1f} the statistics' own cost in one process, "
          f"x{per_record * rows / one['off']:.2f} the whole one-process re-shard)")


if __name__ == "__main__":
    raise SystemExit(main())
