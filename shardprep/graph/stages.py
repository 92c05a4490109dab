"""The steps after Parse: Assign (global positions -> shard pieces), WriteShards, WriteRejected, Commit."""
from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from shardprep import fs, naming, planning, writer
from shardprep.commit import ErrorFact, PlanFact, RejectFact, ShardFact, commit
from shardprep.config import ReshardConfig
from shardprep.graph.counts import CountTable
from shardprep.graph.elements import (
    FACTS,
    BatchCount,
    RejectedBatch,
    ShardPiece,
    SpilledBatch,
    SplitPlan,
    Tagged,
    pack_uints,
    shard_key,
    unpack_uints,
)
from shardprep.graph.pool import Counter
from shardprep.graph.spill import gather_from, read_scattered, reorder, scattered, sorted_url
from shardprep.graph.units import with_sources
from shardprep.permutation import Permutation

__all__ = ["Assign", "Commit", "WriteRejected", "WriteShard", "plan_splits"]

log = logging.getLogger("shardprep")


def plan_splits(config: ReshardConfig, counts: Iterable[BatchCount]) -> dict[int, SplitPlan]:
    """A ``SplitPlan`` per split that holds records, from the counts side input, in O(batches).

    Duplicates that runners sometimes deliver are dropped; conflicting ones fail the run
    (``graph.counts.CountTable``).
    """
    table = CountTable(counts)
    plans = {}
    for s in table.splits():
        total, size = table.totals(s)
        if not total:
            continue
        try:
            num_shards = config.num_shards_for(config.splits[s].name, total, size)
        except planning.PlanError as e:
            plans[s] = SplitPlan(None, 0, None, None, error=str(e))
            continue
        perm = Permutation(total, config.seed + s) if config.shuffle else None
        plans[s] = SplitPlan(table, num_shards, perm, PlanFact(s, total, size, num_shards))
    return plans


class Assign:
    """Gives every record its global position and deals positions round-robin to shards.

    Emits ``(shard_key, ShardPiece)``, one piece per shard the batch touches: its records' byte
    ranges in the parsed spill file (local spill), or one byte range of the batch's reordered spill
    file (remote spill); and each split's PlanFact or ErrorFact once (tag ``FACTS``).
    """

    def __init__(self, config: ReshardConfig) -> None:
        self._config = config
        self._plans: dict[int, SplitPlan] | None = None

    def process(self, batch: SpilledBatch, counts: list) -> Iterator[Any]:
        if self._plans is None:
            self._plans = plan_splits(self._config, counts)
            for plan in self._plans.values():
                yield Tagged(FACTS, ErrorFact(plan.error) if plan.error is not None else plan.fact)
        split, unit, part = batch.split, batch.unit, batch.part
        plan = self._plans[split]
        if plan.error is not None:
            return
        num_shards, perm = plan.num_shards, plan.permutation
        ends = np.frombuffer(batch.ends, dtype="<u8")
        start = plan.counts.first_position(split, tuple(unit), part)
        index = np.arange(start, start + len(ends), dtype=np.uint64)
        position = perm(index) if perm is not None else index
        shard = position % np.uint64(num_shards)
        order = position // np.uint64(num_shards)
        by_shard = np.lexsort((order, shard))
        sorted_shard, sorted_order = shard[by_shard], order[by_shard].astype("<u8")
        bounds = [0, *(np.flatnonzero(np.diff(sorted_shard)) + 1).tolist(), len(ends)]
        keys = [shard_key(split, int(sorted_shard[lo]), num_shards) for lo in bounds[:-1]]
        if scattered(self._config, batch.url):
            # Local spill that fits in memory: the records stay where Parse wrote them; each piece
            # names them by byte range, and WriteShards maps the file (no reordered copy is written).
            starts = np.concatenate(([0], ends[:-1])).astype("<u8")[by_shard]
            stops = ends[by_shard]
            for key, lo, hi in zip(keys, bounds, bounds[1:]):
                yield key, ShardPiece(pack_uints(sorted_order[lo:hi]), batch.url, 0, batch.size,
                                      pack_uints(stops[lo:hi]), pack_uints(starts[lo:hi]))
            return
        # Remote or large spill: reorder the batch by (shard, order) once and spill it; each shard's piece
        # is then one byte range of that file, and only (url, offset, length) crosses the GroupByKey.
        out_url = sorted_url(self._config, batch)
        reorder(batch.url, out_url, ends, by_shard)
        new_ends = np.cumsum(np.diff(ends, prepend=np.uint64(0))[by_shard], dtype="<u8")
        for key, lo, hi in zip(keys, bounds, bounds[1:]):
            first = int(new_ends[lo - 1]) if lo else 0
            piece_ends = (new_ends[lo:hi] - np.uint64(first)).astype("<u8")
            yield key, ShardPiece(pack_uints(sorted_order[lo:hi]), out_url, first, int(new_ends[hi - 1]),
                                  pack_uints(piece_ends))


class WriteShard:
    """One shard's pieces in; the shard file, its records in order, and a ShardFact out."""

    def __init__(self, config: ReshardConfig) -> None:
        self._config = config
        self._shards = Counter("shards_written")

    def process(self, item: tuple[tuple[int, int, int], Iterable[ShardPiece]]) -> Iterator[ShardFact]:
        (split, shard, num_shards), pieces = item
        orders, blobs, ends = [], [], []
        for piece in pieces:  # each piece's records, then one gather in shard order
            orders.append(unpack_uints(piece.orders))
            piece_ends = unpack_uints(piece.ends)
            if piece.starts:  # records in place in a local spill file
                starts = unpack_uints(piece.starts)
                blobs.append(read_scattered(piece.url, starts, piece_ends))
                piece_ends = np.cumsum(piece_ends - starts, dtype="<u8")
            else:
                blobs.append(fs.read_bytes(piece.url, piece.start, piece.end))
            ends.append(piece_ends)
        order = np.argsort(np.concatenate(orders))  # places in the shard are distinct: any sort gives one order
        name = self._config.splits[split].name
        path = naming.shard_path(self._config.run_id, name, shard, num_shards, gzip=self._config.gzip)
        framed = gather_from(blobs, ends, order)
        del blobs
        info = writer.write_shard(self._config.output, path, framed, len(order), compress=self._config.gzip)
        self._shards.inc()
        log.debug("wrote %s: %d records, %d bytes", path, info.num_records, info.num_bytes)
        yield ShardFact(split, shard, num_shards, info)


class WriteRejected:
    """Every unit's dead letters in; one dead-letter file, units in order, and a RejectFact out."""

    def __init__(self, config: ReshardConfig) -> None:
        self._config = config

    def process(self, item: tuple[int, Iterable[RejectedBatch]]) -> Iterator[RejectFact]:
        _, batches = item
        lines = [line for batch in sorted(batches, key=lambda b: tuple(b.unit)) for line in batch.lines]
        path = naming.rejected_path(self._config.run_id, 0, 1)
        count = writer.write_rejected(self._config.output, path, lines)
        log.info("wrote %d dead letters to %s", count, path)
        yield RejectFact(path, count)


class Commit:
    """Every fact in; the manifest (or the failure report) out: its URL.

    ``staged``: the run's staged units file (``graph.units``), whose input list the config lacks.
    """

    def __init__(self, config: ReshardConfig, staged: str | None = None) -> None:
        self._config = config
        self._staged = staged

    def process(self, item: tuple) -> Iterator[str]:
        _, facts = item
        config = with_sources(self._config, self._staged) if self._staged else self._config
        yield commit(config, list(facts))
