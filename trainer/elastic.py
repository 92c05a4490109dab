"""Elastic resume: an epoch checkpointed with W workers finished by W' others, every record once.

An epoch's order is set by the worker count that *started* it: worker w of W reads its own stream
(``trainer.data.worker_records``: ordered interleave, then a shuffle seeded by (seed, epoch)), and
global step j of the epoch trains on the j-th per-worker batch of every one of the W streams. Those
streams move records without looking at them, so the positions they hold can be replayed without
reading a byte (``trainer.data.epoch_positions``). A resume ``k`` steps into an epoch started by W
workers, with W' != W workers, therefore:

1. replays the W streams' positions for the epoch (integers only);
2. deals the records of steps k .. S-1 to the W' workers: global batch j keeps exactly the records
   the W workers would have trained on at step j, and worker w' takes slice w' of it (``deal``), so
   every worker takes the same S - k steps and no record of the epoch is trained twice or missed;
3. reads each worker's slice by position (``read_positions``: ranged reads through the record index
   of ``shardprep.reader`` where the data set has one, else one sequential pass over the shards that
   hold them), and from the next epoch on uses the W' workers' own streams.

``EpochOrder`` is the history that step 0 needs: which worker count started which epoch. The CLI
keeps it beside the checkpoints (``trainer.resume``), a program of its own in its checkpoint
(``trainer.input``). TF-free.
"""
from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Iterator, Sequence

import numpy as np

from shardprep import manifest
from trainer.refusals import TrainerError

__all__ = ["EpochOrder", "ElasticError", "Handover", "deal", "handover", "read_positions"]

log = logging.getLogger(__name__)


class ElasticError(TrainerError):
    """A resume with another worker count that cannot be made exact."""


@dataclasses.dataclass(frozen=True)
class EpochOrder:
    """``segments``: (first epoch, worker count) pairs, ascending: epochs from ``first`` on were started
    by that many workers (until the next pair)."""

    segments: tuple[tuple[int, int], ...]

    def __post_init__(self) -> None:
        firsts = [first for first, _ in self.segments]
        if not self.segments or firsts[0] != 0 or firsts != sorted(set(firsts)) or any(w < 1 for _, w in self.segments):
            raise ElasticError(f"epoch order {list(self.segments)} is not (first epoch, workers) pairs from epoch 0")

    @classmethod
    def start(cls, workers: int) -> EpochOrder:
        return cls(((0, workers),))

    def workers(self, epoch: int) -> int:
        """The worker count that started ``epoch`` (whose streams set its order)."""
        return [w for first, w in self.segments if first <= epoch][-1]

    def resumed(self, *, start_step: int, steps_per_epoch: int, workers: int) -> EpochOrder:
        """The order after a resume at ``start_step`` with ``workers``: the epochs not yet started are theirs."""
        epoch, done = divmod(start_step, steps_per_epoch)
        first_new = epoch + 1 if done else epoch
        kept = [(f, w) for f, w in self.segments if f < first_new]
        if not kept or kept[-1][1] != workers:
            kept.append((first_new, workers))
        return EpochOrder(tuple(kept))

    def to_json(self) -> str:
        return json.dumps({"segments": [list(s) for s in self.segments]})

    @classmethod
    def from_json(cls, text: str | bytes) -> EpochOrder:
        try:
            segments = json.loads(text)["segments"]
            return cls(tuple((int(f), int(w)) for f, w in segments))
        except (ValueError, KeyError, TypeError, RecursionError) as e:
            raise ElasticError(f"epoch order {text[:80]!r} is damaged ({type(e).__name__})") from None


@dataclasses.dataclass(frozen=True)
class Handover:
    """Epoch ``epoch``, started by ``old_workers``, resumed ``done`` steps in by another worker count."""

    epoch: int
    done: int
    old_workers: int


def handover(order: EpochOrder, *, start_step: int, steps_per_epoch: int, workers: int) -> Handover | None:
    """The handover a resume at ``start_step`` with ``workers`` needs; None when the plain streams resume
    exactly (an epoch's start, or the epoch's own worker count)."""
    epoch, done = divmod(start_step, steps_per_epoch)
    old = order.workers(epoch)
    if done == 0 or old == workers:
        return None
    return Handover(epoch, done, old)


def deal(streams: Sequence[np.ndarray], *, global_batch: int, start: int, stop: int, workers: int,
         worker: int) -> np.ndarray:
    """Worker ``worker`` of ``workers``' positions for steps ``start`` .. ``stop - 1``, in step order.

    ``streams[w]``: old worker w's positions for the epoch, in its stream order (at least ``stop``
    per-worker batches). Global batch j is the old workers' j-th batches in worker order; the new
    worker takes its slice of ``global_batch // workers`` records of it."""
    old = len(streams)
    if global_batch % old or global_batch % workers:
        raise ElasticError(f"global batch {global_batch} does not divide among {old} and {workers} workers")
    b, share = global_batch // old, global_batch // workers
    steps = stop - start
    if steps <= 0:
        return np.zeros(0, np.int64)
    for w, s in enumerate(streams):
        if len(s) < stop * b:
            raise ElasticError(f"old worker {w}'s stream holds {len(s)} positions, fewer than {stop} batches of {b}")
    batches = np.stack([np.asarray(s[start * b:stop * b], np.int64).reshape(steps, b) for s in streams], axis=1)
    return batches.reshape(steps, global_batch)[:, worker * share:(worker + 1) * share].reshape(-1)


def read_positions(root: str, split: manifest.SplitInfo, positions: np.ndarray, *, compression: str, split_name: str,
                   chunk: int) -> Iterator[list[bytes]]:
    """The records at ``positions`` of the split (global order: manifest shard order, then record order), in
    that order, ``chunk`` at a time. Through the record index (``shardprep.reader``) where the data set has one;
    else one sequential pass over the shards that hold them, keeping only those records."""
    positions = np.asarray(positions, np.int64)
    reader = _index_reader(root, split_name) if compression == "none" else None
    if reader is not None and len(reader) != split.num_records:  # another run of the data set since: not ours
        reader = None
    if reader is not None:
        for i in range(0, len(positions), chunk):
            yield [bytes(r) for r in reader.read(positions[i:i + chunk])]
        return
    wanted = _scan(root, split, positions, compression=compression)
    for i in range(0, len(positions), chunk):
        yield [wanted[int(p)] for p in positions[i:i + chunk]]


def _index_reader(root: str, split_name: str):  # noqa: ANN202 - shardprep.reader's sequence, when it exists
    """``shardprep.reader.open(root, split)`` (its record index, or a scan of the record headers of a local
    shard written before indexes), or None where it cannot read the data set at random."""
    try:
        from shardprep import reader
    except ImportError:
        return None
    try:
        return reader.open(root, split_name)
    except Exception as e:  # e.g. a store it cannot map: read sequentially
        log.info("no random access to split %r (%s): reading its shards in sequence", split_name, e)
        return None


def _scan(root: str, split: manifest.SplitInfo, positions: np.ndarray, *, compression: str) -> dict[int, bytes]:
    """The records at ``positions``, read in one pass over each shard holding some (CRC-checked)."""
    from shardprep import shard_reader

    wanted: dict[int, bytes] = {}
    need = np.sort(positions)
    first = 0
    for shard in split.shards:
        lo, hi = np.searchsorted(need, [first, first + shard.num_records])
        if lo < hi:
            targets = set((need[lo:hi] - first).tolist())
            with shard_reader.open_shard(root, shard.path, limit=shard.num_bytes) as stream:
                left = len(targets)
                for index, record in enumerate(shard_reader.records(stream, compression=compression)):
                    if index in targets:
                        wanted[first + index] = record
                        left -= 1
                        if not left:
                            break
        first += shard.num_records
    return wanted
