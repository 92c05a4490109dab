"""Random and sequential reads through ``shardprep.reader``, side by side with array-record, the floor and tf.data.

    python -m benchmarks.index_reader --records 200000 --reads 100000 --rounds 3 --cold

Writes one data set with ``shardprep.run`` (CSV in, indexed shards out) and the same records with
array-record's own writer (``group_size:1``), then, alternating the contenders each round (the machine
is shared), times over the same random indices:

- single reads: ``records[i]`` (both CRCs checked), ``ArrayRecordDataSource[i]``, and the floor
  (slicing each record's data out of a memory map by known offsets in Python, no checks);
  array-record's single reads run on the first ``--slow-reads`` of the indices only (at ~2,000 reads
  a second they would take most of the run; a rate is a rate);
- batches of 256: ``records.read(batch)`` and ``ArrayRecordDataSource.__getitems__(batch)``;
- a sequential pass over the split: ``for record in records`` against ``tf.data.TFRecordDataset(files)
  .batch(B).as_numpy_iterator()`` for B = 256 and 1024, counting each batch's records (TensorFlow's
  fastest way to get the records into Python: one record at a time through ``as_numpy_iterator()``
  runs ~50x slower).

``--cold``: rounds of their own with the page cache dropped (``sync; echo 3 > /proc/sys/vm/drop_caches``,
root only) before each contender, which opens its files afresh (the reader's index load is in its
time), on the first ``--cold-reads`` indices. Prints medians (records a second) and the ratios.
"""
from __future__ import annotations

import argparse
import mmap
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from shardprep import manifest, naming, reader

__all__ = ["drop_caches", "main"]


def drop_caches() -> bool:
    """Empties the page cache (root only); False where it cannot."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    except OSError:
        return False
    return True


def _dataset(tmp: Path, records: int) -> Path:
    from tests.conftest import sample_rows, write_csv

    src = write_csv(tmp / "in.csv", sample_rows(records))
    out = tmp / "ds"
    subprocess.run([sys.executable, "-m", "shardprep.run", "--input", str(src), "--output", str(out),
                    "--num-shards", "4"], check=True, capture_output=True)
    return out


def _array_record(tmp: Path, records: list[bytes]) -> str:
    from array_record.python.array_record_module import ArrayRecordWriter

    path = str(tmp / "records.array_record")
    writer = ArrayRecordWriter(path, "group_size:1")
    for r in records:
        writer.write(r)
    writer.close()
    return path


class _Floor:
    """Each record's data sliced out of a memory map of its shard by known offsets, no checks."""

    def __init__(self, root: str, shards: list[manifest.ShardInfo]) -> None:
        self.maps, self.starts, self.ends = [], [], []
        for s in shards:
            with open(naming.join(root, s.path), "rb") as f:
                self.maps.append(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
            off = np.fromfile(naming.join(root, s.index.path), "<u8", offset=16)
            self.starts.append((off[:-1] + 12).tolist())
            self.ends.append((off[1:] - 4).tolist())
        self.where = [(k, j) for k, s in enumerate(shards) for j in range(s.num_records)]

    def read(self, idx: list[int]) -> None:
        maps, starts, ends, where = self.maps, self.starts, self.ends, self.where
        for i in idx:
            k, j = where[i]
            maps[k][starts[k][j]:ends[k][j]]


def _timed(fn: Callable[..., object], *args: object) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process: every thread) of ``fn(*args)``."""
    start, cpu = time.perf_counter(), time.process_time()
    fn(*args)
    return time.perf_counter() - start, time.process_time() - cpu


def _each(fn: Callable[[object], object], items: list) -> list:
    return [fn(item) for item in items]


def _counted(batches) -> int:
    n = 0
    for batch in batches:
        n += len(batch)
    return n


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--records", type=int, default=200_000)
    p.add_argument("--reads", type=int, default=100_000)
    p.add_argument("--slow-reads", type=int, default=10_000, help="array-record's single reads (the first of the indices)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--cold", action="store_true", help="also rounds with the page cache dropped before each contender")
    p.add_argument("--cold-reads", type=int, default=10_000)
    args = p.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf
    from array_record.python.array_record_data_source import ArrayRecordDataSource

    with tempfile.TemporaryDirectory(prefix="index-reader-") as tmp:
        root = _dataset(Path(tmp), args.records)
        records = reader.open(str(root), "train")
        every = records[:]
        ar_path = _array_record(Path(tmp), every)
        source = ArrayRecordDataSource([ar_path])
        shards = manifest.load(str(root)).splits["train"].shards
        floor = _Floor(str(root), shards)
        idx = np.random.default_rng(0).integers(0, len(records), args.reads).tolist()
        few = idx[:args.slow_reads]
        batches = [idx[i:i + 256] for i in range(0, len(idx), 256)]
        files = [naming.join(str(root), s.path) for s in shards]
        assert [records[i] for i in idx[:1000]] == [source[i] for i in idx[:1000]] == [every[i] for i in idx[:1000]]
        assert records.read(batches[0]) == source.__getitems__(batches[0])
        del every

        slices = 10  # the warm contenders take turns on tenths of the indices (the load changes by the second)
        part, few_part = -(-len(idx) // slices), -(-len(few) // slices)
        warm = {  # name: (records timed, what to run on slice j)
            "single: shardprep.reader": (len(idx), lambda j: [records[i] for i in idx[j * part:(j + 1) * part]]),
            "single: ArrayRecordDataSource": (len(few), lambda j: [source[i] for i in few[j * few_part:(j + 1) * few_part]]),
            "single: floor (mmap slices)": (len(idx), lambda j: floor.read(idx[j * part:(j + 1) * part])),
            "batch 256: shardprep.reader": (len(idx), lambda j: [records.read(b) for b in batches[j::slices]]),
            "batch 256: ArrayRecordDataSource": (len(idx), lambda j: [source.__getitems__(b) for b in batches[j::slices]]),
        }
        sequential = {
            "sequential: shardprep.reader": lambda: sum(1 for _ in records),
            "sequential: tf.data .batch(256)": lambda: _counted(
                tf.data.TFRecordDataset(files).batch(256).as_numpy_iterator()),
            "sequential: tf.data .batch(1024)": lambda: _counted(
                tf.data.TFRecordDataset(files).batch(1024).as_numpy_iterator()),
        }
        assert sum(1 for _ in records) == _counted(tf.data.TFRecordDataset(files).batch(256).as_numpy_iterator())
        rates: dict[str, list[float]] = {name: [] for name in [*warm, *sequential]}
        cpu_rates: dict[str, list[float]] = {name: [] for name in rates}
        for _ in range(args.rounds):
            wall, cpu = dict.fromkeys(warm, 0.0), dict.fromkeys(warm, 0.0)
            for j in range(slices):
                for name, (_, fn) in warm.items():
                    w, c = _timed(fn, j)
                    wall[name] += w
                    cpu[name] += c
            for name, (n, _) in warm.items():
                rates[name].append(n / wall[name])
                cpu_rates[name].append(n / cpu[name])
            for name, fn in sequential.items():
                w, c = _timed(fn)
                rates[name].append(len(records) / w)
                cpu_rates[name].append(len(records) / c)
        cold_idx = idx[:args.cold_reads]
        cold_batches = [cold_idx[i:i + 256] for i in range(0, len(cold_idx), 256)]
        cold = {  # each opens its files afresh, in its time
            "cold single: shardprep.reader": lambda: _each(reader.open(str(root), "train").__getitem__, cold_idx),
            "cold single: ArrayRecordDataSource": lambda: _each(ArrayRecordDataSource([ar_path]).__getitem__, cold_idx),
            "cold batch 256: shardprep.reader": lambda: _each(reader.open(str(root), "train").read, cold_batches),
            "cold batch 256: ArrayRecordDataSource": lambda: _each(ArrayRecordDataSource([ar_path]).__getitems__,
                                                                   cold_batches),
            "cold sequential: shardprep.reader": lambda: sum(1 for _ in reader.open(str(root), "train")),
            "cold sequential: tf.data .batch(256)": lambda: _counted(
                tf.data.TFRecordDataset(files).batch(256).as_numpy_iterator()),
        }
        if args.cold and not drop_caches():
            print("--cold: cannot drop the page cache (not root?): no cold rounds")
            args.cold = False
        if args.cold:
            for name in cold:
                rates[name] = []
            floor.maps.clear()
            records.close()
            del source
            for _ in range(args.rounds):
                for name, fn in cold.items():
                    drop_caches()
                    w, c = _timed(fn)
                    n = len(records) if "sequential" in name else len(cold_idx)
                    rates[name].append(n / w)
                    cpu_rates.setdefault(name, []).append(n / c)
        med = {name: statistics.median(values) for name, values in rates.items()}
        cpu_med = {name: statistics.median(values) for name, values in cpu_rates.items()}
        print(f"{len(records):,} records ({sum(s.num_bytes for s in shards) / 1e6:.1f} MB in {len(shards)} shards), "
              f"{len(idx):,} random reads ({len(few):,} for array-record's single reads), {args.rounds} rounds, "
              "medians, records/s of wall time (of this process's CPU time):")
        for name, value in med.items():
            print(f"  {name:42s} {value:>12,.0f} ({cpu_med[name]:,.0f})")
        ratios = [("single: reader / ArrayRecordDataSource", "single: shardprep.reader", "single: ArrayRecordDataSource"),
                  ("single: reader / floor", "single: shardprep.reader", "single: floor (mmap slices)"),
                  ("batch 256: reader / ArrayRecordDataSource", "batch 256: shardprep.reader",
                   "batch 256: ArrayRecordDataSource"),
                  ("sequential: reader / tf.data (the faster)", "sequential: shardprep.reader",
                   max(("sequential: tf.data .batch(256)", "sequential: tf.data .batch(1024)"), key=med.get))]
        if args.cold:
            ratios += [("cold single: reader / ArrayRecordDataSource", "cold single: shardprep.reader",
                        "cold single: ArrayRecordDataSource"),
                       ("cold batch 256: reader / ArrayRecordDataSource", "cold batch 256: shardprep.reader",
                        "cold batch 256: ArrayRecordDataSource"),
                       ("cold sequential: reader / tf.data", "cold sequential: shardprep.reader",
                        "cold sequential: tf.data .batch(256)")]
        for label, a, b in ratios:
            print(f"  {label:42s} {med[a] / med[b]:>11.2f}x ({cpu_med[a] / cpu_med[b]:.2f}x)")
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
