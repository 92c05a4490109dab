"""Records per shard under three ways of assigning records to shards, and what W workers then do.

- ``shardprep``: the real manifest of a run (floor(n/N) or ceil(n/N) per shard).
- ``beam_round_robin``: Beam's ``WriteToTFRecord(num_shards=N)``: ``_RoundRobinKeyFn`` (Beam's own
  class, run here) deals each bundle's records round-robin from a random start. Bundles are the
  records of 1 MB input splits, as a file source on a distributed runner makes them.
- ``hashed``: a record goes to the shard whose range of a 128-bit key hash holds its key's hash (the
  assignment of TFDS's current Beam writer): counts are multinomial.
- ``raw_files``: the input files as they are.

Workers read whole files (``w, w+W, ...``, TF's FILE auto-shard) and, without equalisation, take
ceil(records / B) batches; TF keeps every worker stepping until the last one runs dry, feeding
empty batches to the others. shardprep's trainer reads exact record ranges instead
(``shardprep.planning.plan_workers``): every worker takes the same number of full batches.
"""
from __future__ import annotations

import hashlib
import math
import random
import statistics
from collections.abc import Iterable, Mapping, Sequence

__all__ = ["beam_round_robin", "hashed", "per_worker_table", "raw_counts", "spread"]


def _split_record_counts(path: str, split_bytes: int) -> list[int]:
    """Records (lines after the header) starting in each ``split_bytes`` range of a CSV file."""
    import numpy as np

    bins = np.zeros(1, dtype=np.int64)
    with open(path, "rb") as f:
        base, last = 0, b""
        while block := f.read(16 << 20):
            starts = np.flatnonzero(np.frombuffer(block, dtype=np.uint8) == 10) + base + 1  # a line starts after \n
            b = np.bincount(starts // split_bytes)
            if len(b) > len(bins):
                bins = np.pad(bins, (0, len(b) - len(bins)))
            bins[: len(b)] += b
            base += len(block)
            last = block[-1:]
    if last == b"\n":  # the final newline starts no record
        bins[base // split_bytes] -= 1
    return [int(c) for c in bins if c > 0]


def beam_round_robin(files: Sequence[str], num_shards: int, *, split_bytes: int, seed: int = 0) -> list[int]:
    """Per-shard counts from Beam's ``_RoundRobinKeyFn``, one bundle per input split."""
    from apache_beam.io.iobase import _RoundRobinKeyFn

    random.seed(seed)
    counts = [0] * num_shards
    fn = _RoundRobinKeyFn()
    for path in files:
        for bundle in _split_record_counts(path, split_bytes):
            fn.start_bundle()
            # process() yields (shard, element); only the shard sequence matters
            first = next(iter(fn.process(None, num_shards)))[0]
            full, rest = divmod(bundle, num_shards)
            for s in range(num_shards):
                counts[s] += full
            for k in range(rest):
                counts[(first + k) % num_shards] += 1
    return counts


def _ids(files: Iterable[str]) -> Iterable[bytes]:
    for path in files:
        with open(path, "rb") as f:
            f.readline()
            for line in f:
                yield line[: line.index(b",")]


def hashed(files: Sequence[str], num_shards: int, *, salt: bytes = b"train") -> list[int]:
    """Per-shard counts when shard = range of the 128-bit hash space holding md5(salt + key)."""
    counts = [0] * num_shards
    for key in _ids(files):
        h = int.from_bytes(hashlib.md5(salt + key).digest(), "big")
        counts[(h * num_shards) >> 128] += 1
    return counts


def raw_counts(files: Sequence[str]) -> list[int]:
    out = []
    for path in files:
        with open(path, "rb") as f:
            n = sum(block.count(b"\n") for block in iter(lambda: f.read(16 << 20), b""))
        out.append(n - 1)
    return out


def spread(counts: Sequence[int]) -> dict:
    mean = statistics.fmean(counts)
    return {"shards": len(counts), "min": min(counts), "max": max(counts), "mean": round(mean, 1),
            "cv": round(statistics.pstdev(counts) / mean, 5) if mean else 0.0,
            "max_over_min": round(max(counts) / min(counts), 4) if min(counts) else None}


def _file_mode(counts: Sequence[int], workers: int, batch: int) -> dict:
    if len(counts) < workers:
        return {"workers": workers, "fails": f"{len(counts)} files for {workers} workers: FILE sharding refuses; "
                "DATA sharding makes every worker read all data"}
    records = [sum(counts[w::workers]) for w in range(workers)]
    steps = [math.ceil(r / batch) for r in records]
    longest = max(steps)
    empty = sum(longest - s for s in steps)
    return {"workers": workers, "records": records, "steps": steps, "epoch_steps": longest,
            "empty_replica_steps": empty, "idle_fraction": round(empty / (workers * longest), 4),
            "partial_batches": sum(1 for r in records if r % batch)}


def _exact(counts: Sequence[int], workers: int, batch: int) -> dict:
    from shardprep import planning

    plan = planning.plan_workers(list(counts), workers)
    steps = plan.steps_per_epoch(batch)
    return {"workers": workers, "records": [plan.records(w) for w in range(workers)], "steps": [steps] * workers,
            "epoch_steps": steps, "empty_replica_steps": 0, "idle_fraction": 0.0, "partial_batches": 0,
            "mode": plan.mode, "dropped": sum(counts) - steps * batch * workers}


def per_worker_table(methods: Mapping[str, Sequence[int]], workers: Sequence[int], *, batch: int,
                     exact: Iterable[str] = ()) -> dict:
    exact = set(exact)
    return {name: [(_exact if name in exact else _file_mode)(counts, w, batch) for w in workers]
            for name, counts in methods.items()}
