"""The elements that cross the re-shard's Beam stages, as named types.

Record bytes never cross the runner: they wait in spill files (``graph.spill``), and elements carry
only (url, byte range, record ends), so the runner's coders and memory see small values whatever
the data size. Record ends are little-endian uint64 offsets, as bytes.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from shardprep.commit import PlanFact
from shardprep.permutation import Permutation

if TYPE_CHECKING:
    from shardprep.graph.counts import CountTable

__all__ = ["FACTS", "REJECTED", "STATS", "BatchCount", "RejectedBatch", "ShardPiece", "SpilledBatch", "SplitPlan", "shard_key"]

REJECTED, FACTS, STATS = "rejected", "facts", "stats"  # tags of Parse's and Assign's side outputs


class SpilledBatch(NamedTuple):
    """Parse -> Assign: part ``part`` of unit ``unit``'s records of split ``split``, in ``url`` (``size`` bytes)."""

    split: int
    unit: tuple[int, int]
    part: int
    url: str
    size: int
    ends: bytes


class BatchCount(NamedTuple):
    """Count -> Assign (side input): how many records and bytes one ``SpilledBatch`` holds."""

    split: int
    unit: tuple[int, int]
    part: int
    num_records: int
    size: int


class ShardPiece(NamedTuple):
    """Assign -> GroupByShard -> WriteShards: the records of one batch bound for one shard.

    Bytes ``[start, end)`` of the reordered spill file ``url``; ``orders``: each record's place in
    the shard (uint64, bytes); ``ends``: record ends relative to ``start``. With ``starts`` (local
    spill, ``graph.spill.scattered``): the records lie where Parse wrote them in ``url``, record i
    being bytes ``[starts[i], ends[i])`` of the file (uint64, bytes), and no reordered copy exists.
    """

    orders: bytes
    url: str
    start: int
    end: int
    ends: bytes
    starts: bytes = b""


class RejectedBatch(NamedTuple):
    """Parse -> GroupRejected -> WriteRejected: one unit's dead-letter lines, in file order."""

    unit: tuple[int, int]
    lines: list[bytes]


class SplitPlan(NamedTuple):
    """How Assign places one split's records: first position of each batch, shard count, permutation.

    ``counts`` (shared by every split) gives each batch's first position; ``error`` is set (and
    the rest empty) when the split's shard count cannot be planned.
    """

    counts: CountTable | None
    num_shards: int
    permutation: Permutation | None
    fact: PlanFact | None
    error: str | None = None


def shard_key(split: int, shard: int, num_shards: int) -> tuple[int, int, int]:
    """The GroupByShard key: a plain tuple, so every runner encodes it deterministically."""
    return (split, shard, num_shards)
