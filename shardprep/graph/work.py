"""The re-shard's working steps, built once for both the graph (``graph.reshard``) and the local
pool's prefetch (``graph.prefetch``), so that the two are the same work (compared as pickles)."""
from __future__ import annotations

from typing import NamedTuple

from shardprep.config import ReshardConfig
from shardprep.graph.parse import Parse
from shardprep.graph.prefetch import Ahead, as_side_input, by_key, outputs_before
from shardprep.graph.ranges import CountRanges
from shardprep.graph.spill import count, scattered
from shardprep.graph.stages import Assign, WriteShard
from shardprep.graph.units import slim

__all__ = ["Steps", "ahead", "steps"]


class Steps(NamedTuple):
    """The steps that run on the pool: CountRanges and Parse over the work units, Assign over
    Parse's batches, WriteShards over Assign's pieces grouped by shard."""

    count_ranges: CountRanges
    parse: Parse
    assign: Assign
    write: WriteShard


def steps(config: ReshardConfig) -> Steps:
    cfg = slim(config)
    return Steps(CountRanges(), Parse(cfg), Assign(cfg), WriteShard(cfg))


def ahead(config: ReshardConfig) -> list[Ahead]:
    """The chain the pool runs ahead of Beam, as the graph wires it: CountRanges; Parse with
    ``AsList(ranges)``; where the spill is read in place (``graph.spill.scattered``: Assign then
    reads no file and writes only its split's listing of batches, so running it twice is harmless,
    as is writing a shard twice: atomically, the same bytes), Assign with ``AsList(counts)`` and WriteShards over its pieces by
    shard key, as GroupByShard gives them (a few numbers a piece: holding them beside Beam's copy
    costs little)."""
    work = steps(config)
    chain = [Ahead(work.count_ranges), Ahead(work.parse, side=as_side_input)]
    if scattered(config, config.output):  # the spill lives in the output folder
        chain += [Ahead(work.assign, over=outputs_before, side=_counts), Ahead(work.write, over=by_key)]
    return chain


def _counts(batches: list) -> tuple:
    """Assign's side input from Parse's batches: ``Count`` of each (``AsList``)."""
    return ([count(batch) for batch in batches],)
