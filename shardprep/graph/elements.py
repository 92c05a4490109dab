"""The elements that cross the re-shard's Beam stages, as named types.

Record bytes never cross the runner: they wait in spill files (``graph.spill``), and elements carry
only a batch's url, size and record count, so the runner's coders and memory see a few small
values per batch whatever the number of records. What is per record stays on disk beside the
bytes (a batch's record ends) or is computed where it is needed (a shard's records, from the
permutation's inverse: ``graph.stages.WriteShards``).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from shardprep import manifest
from shardprep.permutation import Permutation

if TYPE_CHECKING:
    from shardprep.graph.counts import CountTable

__all__ = ["FACTS", "REJECTED", "STATS", "BatchCount", "DuplicateFact", "ErrorFact", "HashesFact", "PlanFact", "RejectFact", "RejectedBatch", "ShardBatches", "ShardFact",
           "ShardPiece", "SpilledBatch", "SplitPlan", "StatsFact", "Tagged", "UnitFact", "shard_key"]

REJECTED, FACTS, STATS = "rejected", "facts", "stats"  # tags of Parse's and Assign's side outputs


class Tagged(NamedTuple):
    """An output of a step's work for the side output ``tag`` (Beam's ``TaggedOutput``, without Beam:
    the work runs in pool processes that never import Beam; ``pipelines.beam_graph`` hands it to Beam)."""

    tag: str
    value: object


class SpilledBatch(NamedTuple):
    """Parse -> Assign: part ``part`` of unit ``unit``'s records of split ``split``: ``num_records``
    framed records in ``url`` (``size`` bytes), then their ends (``graph.spill.pack``)."""

    split: int
    unit: tuple[int, int]
    part: int
    url: str
    size: int
    num_records: int


class BatchCount(NamedTuple):
    """Count -> Assign (side input): how many records and bytes one ``SpilledBatch`` holds."""

    split: int
    unit: tuple[int, int]
    part: int
    num_records: int
    size: int


class ShardPiece(NamedTuple):
    """Assign -> GroupByShard -> WriteShards: one batch's records bound for one shard.

    The batch holds positions ``[first, first + num_records)`` of its split's ``total`` records;
    which of them the shard takes, and in what order, follows from the plan (``WriteShards``). In
    place (local spill, ``graph.spill.in_place``): the records lie where Parse wrote them, in
    ``url`` (``end`` bytes; ``start`` 0), their ends beside it. Else bytes ``[start, end)`` of the
    reordered spill file ``url`` hold the shard's records of the batch, in order, after their
    lengths (``graph.spill.segment``).
    """

    url: str
    start: int
    end: int
    first: int
    num_records: int
    total: int
    in_place: bool


class ShardBatches(NamedTuple):
    """Assign -> GroupByShard -> WriteShards, in place: a shard's one piece, naming the file that
    lists its split's batches (``graph.spill.write_listing``), each of which is a ``ShardPiece`` in
    place. One element per shard whatever the number of batches, where a piece per batch and shard
    would make batches x shards elements."""

    url: str
    total: int


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


# The facts: what each step reports to Commit (``commit.assemble`` checks them all before the manifest).


class UnitFact(NamedTuple):
    """Parse -> Commit: one work unit's counts: records read, rejected (by reason), kept per split."""

    unit: tuple[int, int]
    file_index: int
    read: int
    rejected: int
    kept: tuple[int, ...]  # records kept per split, in split order
    by_reason: tuple[tuple[str, int], ...]
    missing: tuple[tuple[str, int], ...] = ()  # rows that left each feature out (a missing value)
    files: tuple[tuple[int, int, int], ...] = ()  # a FileGroup's (file index, read, rejected) per file; ()
    # for a unit of one file (``file_index``)


class PlanFact(NamedTuple):
    """Assign -> Commit: one split's plan: its records, bytes and shard count."""

    split: int
    num_records: int
    num_bytes: int
    num_shards: int


class ShardFact(NamedTuple):
    """WriteShards -> Commit: one shard written (its path, records, bytes and checksum in ``info``)."""

    split: int
    index: int
    num_shards: int
    info: manifest.ShardInfo


class RejectFact(NamedTuple):
    """WriteRejected -> Commit: the dead-letter file written and its record count."""

    path: str
    num_records: int


class StatsFact(NamedTuple):
    """MergeStats -> Commit: one split's feature statistics and their stored mergeable state."""

    split: int
    statistics: dict | None  # feature name -> statistics of this split (``stats.feature_stats.to_json``); None: replaced
    sketch: manifest.SketchInfo | None = None  # their mergeable state, stored (``stats.state``)


class ErrorFact(NamedTuple):
    """Any step -> Commit: a reason the run must not commit (the commit refuses, naming it)."""

    message: str


class DuplicateFact(NamedTuple):
    """Assign -> Commit (``--dedup exact``): the records of spilled batch ``batch`` (split, file,
    unit, part) dropped as duplicates, written as dead letters to ``path``; ``files``: (input file
    index, count) of them."""

    batch: tuple[int, int, int, int]
    split: int
    count: int
    path: str
    files: tuple[tuple[int, int], ...]


class HashesFact(NamedTuple):
    """Assign -> Commit (``--dedup exact``): the run's kept records' hashes, stored for its generation."""

    info: manifest.HashesInfo


def shard_key(split: int, shard: int, num_shards: int) -> tuple[int, int, int]:
    """The GroupByShard key: a plain tuple, so every runner encodes it deterministically."""
    return (split, shard, num_shards)
