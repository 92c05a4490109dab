"""Random and sequential reads through ``shardprep.reader``, side by side with array-record and the floor.

    python -m benchmarks.index_reader --records 200000 --reads 100000 --rounds 3

Writes one data set with ``shardprep.run`` (CSV in, indexed shards out), the same records with
array-record's own writer, and then, alternating the contenders each round (the machine is shared),
times: single random reads (``records[i]``, CRC-checked) against ``ArrayRecordDataSource[i]`` and the
floor (slicing the same bytes out of a memory map by known offsets in Python); batches of 256
(``read``) against ``ArrayRecordDataSource.__getitems__``; and a sequential pass over the split
against ``tf.data.TFRecordDataset``. Prints medians (records a second).
"""
from __future__ import annotations

import argparse
import mmap
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from shardprep import manifest, naming, reader

__all__ = ["main"]


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


def _rate(n: int, fn) -> float:
    start = time.perf_counter()
    fn()
    return n / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--records", type=int, default=200_000)
    p.add_argument("--reads", type=int, default=100_000)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    from array_record.python.array_record_data_source import ArrayRecordDataSource

    with tempfile.TemporaryDirectory(prefix="index-reader-") as tmp:
        root = _dataset(Path(tmp), args.records)
        records = reader.open(str(root), "train")
        every = records[:]
        source = ArrayRecordDataSource([_array_record(Path(tmp), every)])
        shards = manifest.load(str(root)).splits["train"].shards
        maps, starts, ends = [], [], []
        for s in shards:  # the floor: known offsets, bytes sliced from a map
            with open(naming.join(str(root), s.path), "rb") as f:
                maps.append(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
            off = np.fromfile(naming.join(str(root), s.index.path), "<u8", offset=16)
            starts.append((off[:-1] + 12).tolist())
            ends.append((off[1:] - 4).tolist())
        where = [(k, j) for k, s in enumerate(shards) for j in range(s.num_records)]
        idx = np.random.default_rng(0).integers(0, len(records), args.reads).tolist()
        batches = [idx[i:i + 256] for i in range(0, len(idx), 256)]
        files = [naming.join(str(root), s.path) for s in shards]
        import tensorflow as tf

        def floor() -> None:
            for i in idx:
                k, j = where[i]
                maps[k][starts[k][j]:ends[k][j]]

        contenders = {
            "single: shardprep.reader": lambda: [records[i] for i in idx],
            "single: ArrayRecordDataSource": lambda: [source[i] for i in idx],
            "single: floor (mmap slices)": floor,
            "batch 256: shardprep.reader": lambda: [records.read(b) for b in batches],
            "batch 256: ArrayRecordDataSource": lambda: [source.__getitems__(b) for b in batches],
        }
        sequential = {
            "sequential: shardprep.reader": lambda: sum(1 for _ in records),
            "sequential: tf.data.TFRecordDataset": lambda: sum(1 for _ in tf.data.TFRecordDataset(files)
                                                               .batch(1024).unbatch().as_numpy_iterator()),
        }
        assert [records[i] for i in idx[:1000]] == [source[i] for i in idx[:1000]]
        rates: dict[str, list[float]] = {name: [] for name in [*contenders, *sequential]}
        for _ in range(args.rounds):
            for name, fn in contenders.items():
                rates[name].append(_rate(len(idx), fn))
            for name, fn in sequential.items():
                rates[name].append(_rate(len(records), fn))
        print(f"{len(records):,} records ({sum(s.num_bytes for s in shards) / 1e6:.1f} MB in {len(shards)} shards), "
              f"{len(idx):,} random reads, {args.rounds} rounds, medians (records/s):")
        for name, values in rates.items():
            print(f"  {name:40s} {statistics.median(values):>12,.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
