"""Pure planning: splits, shard counts, balance, and which records each training worker reads.

Plain functions over ints and small frozen dataclasses, no Beam and no TensorFlow, so both the
pipeline and the trainer use the same arithmetic and tests can table-check it.
"""
from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from shardprep import naming, native
from shardprep.errors import PlanError

__all__ = [
    "DEFAULT_TARGET_SHARD_BYTES",
    "Piece",
    "PlanError",
    "Split",
    "WorkerPlan",
    "choose_num_shards",
    "check_num_shards",
    "parse_splits",
    "plan_workers",
    "reading_order",
    "shard_of",
    "shard_sizes",
    "split_index",
    "split_indices",
    "valid_worker_counts",
]

DEFAULT_TARGET_SHARD_BYTES = 128 * 1024 * 1024
_HASH_SPACE = 1 << 64


@dataclasses.dataclass(frozen=True)
class Split:
    """One named split and its share of the records."""

    name: str
    fraction: float

    def __post_init__(self) -> None:
        naming.validate_split_name(self.name)
        if not 0.0 < self.fraction <= 1.0:
            raise PlanError(f"split {self.name!r} has fraction {self.fraction}: expected a value in (0, 1]")


def parse_splits(text: str) -> tuple[Split, ...]:
    """Parses ``train=0.9,eval=0.1``; a bare name (``train``) means the whole data set."""
    text = text.strip()
    if "=" not in text:
        return (Split(naming.validate_split_name(text), 1.0),)
    splits = []
    for part in text.split(","):
        name, sep, value = part.partition("=")
        try:
            fraction = float(value)
        except ValueError:
            fraction = float("nan")
        if not sep or not math.isfinite(fraction):
            raise PlanError(f"--split {text!r}: {part!r} is not NAME=FRACTION (e.g. train=0.9,eval=0.1)")
        splits.append(Split(name.strip(), fraction))
    names = [s.name for s in splits]
    if len(set(names)) != len(names):
        raise PlanError(f"--split {text!r} names a split twice")
    total = sum(s.fraction for s in splits)
    if abs(total - 1.0) > 1e-6:
        raise PlanError(f"--split {text!r}: fractions add up to {total:g}, expected 1")
    return tuple(splits)


def split_thresholds(splits: Sequence[Split]) -> tuple[int, ...]:
    """Upper bounds in [0, 2**64) of each split's share of the hash space (last one is 2**64)."""
    bounds, acc = [], 0.0
    for s in splits[:-1]:
        acc += s.fraction
        bounds.append(min(_HASH_SPACE, int(acc * _HASH_SPACE)))
    return (*bounds, _HASH_SPACE)


def split_index(record: bytes | memoryview, seed: int, thresholds: Sequence[int]) -> int:
    """Which split a record belongs to: a keyed hash of its bytes, stable across runs and runners."""
    if len(thresholds) == 1:
        return 0
    key = seed.to_bytes(8, "little", signed=True)
    h = int.from_bytes(hashlib.blake2b(record, digest_size=8, key=key).digest(), "little")
    for i, bound in enumerate(thresholds):
        if h < bound:
            return i
    return len(thresholds) - 1


def split_indices(blob: bytes | bytearray | memoryview, starts: np.ndarray, stops: np.ndarray, seed: int,
                  thresholds: Sequence[int]) -> np.ndarray:
    """``split_index`` of every record ``blob[starts[i]:stops[i]]`` at once (uint8), in compiled code where built."""
    if len(thresholds) == 1:
        return np.zeros(len(starts), np.uint8)
    bounds = list(thresholds[:-1])  # the last bound never decides: a hash past every other one is the last split
    k = next((i for i, b in enumerate(bounds) if b >= _HASH_SPACE), len(bounds))  # a bound past every hash: split k
    which = native.split_indices(blob, np.ascontiguousarray(starts, "<i8"), np.ascontiguousarray(stops, "<i8"), seed,
                                 np.asarray(bounds[:k], "<u8"))
    return np.frombuffer(which, np.uint8)


def check_num_shards(num_shards: int, workers: int | None) -> None:
    """Refuses a shard count that the worker count does not divide, naming the nearest valid ones."""
    if num_shards < 1:
        raise PlanError(f"--num-shards {num_shards}: expected at least 1")
    if workers is None:
        return
    if workers < 1:
        raise PlanError(f"--workers {workers}: expected at least 1")
    if num_shards % workers:
        lower = num_shards // workers * workers
        upper = lower + workers
        options = " or ".join(str(n) for n in (lower, upper) if n > 0)
        raise PlanError(
            f"--num-shards {num_shards} does not divide evenly among --workers {workers}: "
            f"every worker must get the same number of shards; use --num-shards {options}"
        )


def choose_num_shards(
    *,
    num_records: int,
    num_bytes: int,
    num_shards: int | None = None,
    workers: int | None = None,
    shards_per_worker: int | None = None,
    target_shard_bytes: int = DEFAULT_TARGET_SHARD_BYTES,
    split: str = "train",
) -> int:
    """Shard count for one split.

    ``num_shards`` wins when given; otherwise a multiple of ``workers`` that puts shards near
    ``target_shard_bytes`` (at least one shard per worker), or ``workers * shards_per_worker``.
    Refuses a plan that would leave a shard empty.
    """
    if num_shards is not None:
        check_num_shards(num_shards, workers)
        n = num_shards
    elif workers is not None:
        check_num_shards(workers, workers)
        if shards_per_worker is not None:
            if shards_per_worker < 1:
                raise PlanError(f"--shards-per-worker {shards_per_worker}: expected at least 1")
            per_worker = shards_per_worker
        else:
            per_worker = max(1, math.ceil(num_bytes / (target_shard_bytes * workers)))
            per_worker = max(1, min(per_worker, num_records // workers))
        n = workers * per_worker
    else:
        raise PlanError("give --num-shards N or --workers W")
    if num_records < n:
        raise PlanError(
            f"split {split!r} has {num_records} records, fewer than its {n} shards, so some shards "
            f"would be empty: use fewer shards or workers, a larger share for {split!r} in --split, "
            f"or more data"
        )
    return n


def shard_of(position: Any, num_shards: Any) -> tuple[Any, Any]:
    """(shard, order within the shard) of a permuted position: records are dealt round-robin.

    The one home of the rule: it takes ints, or numpy arrays of positions with a numpy count (the
    pipeline deals a whole batch at once), and gives floor(n/N) or ceil(n/N) records per shard.
    """
    return position % num_shards, position // num_shards


def positions_of(shard: int, num_shards: int, num_records: int) -> np.ndarray:
    """The positions ``shard_of`` deals to ``shard``, in their order within it (its inverse)."""
    return np.arange(shard, num_records, num_shards, dtype=np.uint64)


def shard_sizes(num_records: int, num_shards: int) -> list[int]:
    """Records per shard when positions are dealt round-robin: floor or ceil of n/N."""
    base, extra = divmod(num_records, num_shards)
    return [base + (1 if i < extra else 0) for i in range(num_shards)]


def reading_order(paths: Sequence[str], seed: int) -> list[int]:
    """The order in which readers take a split's shards (indexes into ``paths``): the manifest's own
    when they all belong to one run (one generation), else ordered by a keyed hash of each path, so
    that an epoch mixes the generations of an appended data set (the trainer cuts the order into
    workers' ranges and interleaves each worker's pieces). It depends only on the paths and the data
    set's seed, never on the worker count, and an append leaves the older shards' order as it was."""
    if len({p.split("/", 1)[0] for p in paths}) <= 1:
        return list(range(len(paths)))
    key = seed.to_bytes(8, "little", signed=True)
    return sorted(range(len(paths)), key=lambda i: hashlib.blake2b(paths[i].encode(), digest_size=8, key=key).digest())


def valid_worker_counts(num_shards: int, limit: int = 1024) -> list[int]:
    """Worker counts that read whole shards (file mode): the divisors of the shard count."""
    return [w for w in range(1, min(num_shards, limit) + 1) if num_shards % w == 0]


@dataclasses.dataclass(frozen=True)
class Piece:
    """Records ``skip`` .. ``skip + take`` of shard ``shard``."""

    shard: int
    skip: int
    take: int


@dataclasses.dataclass(frozen=True)
class WorkerPlan:
    """Which records every worker reads: ``pieces[w]`` for worker ``w``."""

    mode: str  # "file" or "range"
    pieces: tuple[tuple[Piece, ...], ...]

    def records(self, worker: int) -> int:
        return sum(p.take for p in self.pieces[worker])

    def steps_per_epoch(self, per_worker_batch: int) -> int:
        """Full batches every worker can take: the same number on all of them."""
        if per_worker_batch < 1:
            raise PlanError(f"batch size {per_worker_batch}: expected at least 1")
        return min(self.records(w) for w in range(len(self.pieces))) // per_worker_batch


def plan_workers(shard_records: Sequence[int], num_workers: int) -> WorkerPlan:
    """Gives every worker its own records.

    *file* mode when ``num_workers`` divides the shard count and every worker then gets the same
    records to one (shards of one generation: floor or ceil of n/N each): worker w reads shards w,
    w+W, ... whole. Otherwise *range* mode (also for shards of several generations whose sizes
    differ): the shards, concatenated in order, are cut into ``num_workers`` contiguous ranges of
    floor or ceil(n/W) records, expressed as (shard, skip, take) pieces.
    """
    if num_workers < 1:
        raise PlanError(f"worker count {num_workers}: expected at least 1")
    n_shards = len(shard_records)
    if n_shards == 0:
        raise PlanError("the data set has no shards")
    if n_shards % num_workers == 0:
        pieces = tuple(
            tuple(Piece(s, 0, shard_records[s]) for s in range(w, n_shards, num_workers))
            for w in range(num_workers)
        )
        counts = [sum(p.take for p in mine) for mine in pieces]
        if max(counts) - min(counts) <= 1:
            return WorkerPlan("file", pieces)
    total = sum(shard_records)
    starts = [0]
    for count in shard_records:
        starts.append(starts[-1] + count)
    per_worker = []
    for w in range(num_workers):
        lo, hi = w * total // num_workers, (w + 1) * total // num_workers
        mine = []
        for s, count in enumerate(shard_records):
            a, b = max(lo, starts[s]), min(hi, starts[s] + count)
            if a < b:
                mine.append(Piece(s, a - starts[s], b - a))
        per_worker.append(tuple(mine))
    return WorkerPlan("range", tuple(per_worker))
