"""The steps after Parse: Assign (global positions -> shard pieces), WriteShards, WriteRejected,
MergeStats (the statistics per split), Commit."""
from __future__ import annotations

import functools
import logging
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from shardprep import fs, naming, planning, writer
from shardprep.commit import commit
from shardprep.config import ReshardConfig
from shardprep.graph.counting import Counter
from shardprep.graph.counts import CountTable
from shardprep.graph.duplicates import Duplicates, dropped_any
from shardprep.graph.elements import (
    FACTS,
    STATS,
    BatchCount,
    ErrorFact,
    PlanFact,
    RejectedBatch,
    RejectFact,
    ShardBatches,
    ShardFact,
    ShardPiece,
    SpilledBatch,
    SplitPlan,
    StatsFact,
    Tagged,
    shard_key,
)
from shardprep.graph.spill import (
    Placed,
    in_place,
    listing_url,
    place,
    read_listing,
    record_bounds,
    reorder,
    segment,
    sorted_url,
    write_listing,
)
from shardprep.graph.tasks import helper
from shardprep.graph.units import with_sources
from shardprep.permutation import Permutation
from shardprep.stats import columns as stats_columns
from shardprep.stats import distinct, feature_stats
from shardprep.stats import state as stats_state

__all__ = ["Assign", "Commit", "MergeStats", "WriteRejected", "WriteShards", "permutation", "plan_splits"]

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
        plans[s] = SplitPlan(table, num_shards, permutation(config, s, total), PlanFact(s, total, size, num_shards))
    return plans


def permutation(config: ReshardConfig, split: int, total: int) -> Permutation | None:
    """The shuffle of split ``split``'s ``total`` records (None: ``--no-shuffle``), the one Assign
    deals positions by and WriteShards inverts."""
    return Permutation(total, config.seed + split) if config.shuffle else None


class Assign:
    """Gives every record its global position and deals positions round-robin to shards.

    Emits, with each split's PlanFact or ErrorFact once (tag ``FACTS``): in place (local spill),
    ``(shard_key, ShardBatches)`` once per shard in all (the split's batches listed in one file);
    else ``(shard_key, ShardPiece)`` per shard the batch's records go to, the batch reordered by
    (shard, place in shard) into one segment per shard. A piece names a batch, not its records:
    WriteShards finds them from the plan.

    With ``--dedup exact`` the plan counts the records kept (``graph.duplicates.Duplicates``, found once
    for the run and read by every process), and a batch first drops its duplicates (its dead
    letters' facts, tag ``FACTS``).
    """

    def __init__(self, config: ReshardConfig) -> None:
        self._config = config
        self._plans: dict[int, SplitPlan] | None = None
        self._duplicates: Duplicates | None = None

    def process(self, batch: SpilledBatch, counts: list) -> Iterator[Any]:
        if self._plans is None:
            if self._config.dedup == "exact":
                self._duplicates = Duplicates(self._config, counts)
                self._first = min((c.split, *c.unit, c.part) for c in counts)
                counts = self._duplicates.counts(counts)
            self._plans = plan_splits(self._config, counts)
            for plan in self._plans.values():
                yield Tagged(FACTS, ErrorFact(plan.error) if plan.error is not None else plan.fact)
        if self._duplicates is not None:
            if (batch.split, *batch.unit, batch.part) == self._first:  # the run's first batch stores the kept hashes
                yield Tagged(FACTS, self._duplicates.store())
            batch, facts = self._duplicates.drop(batch)
            for fact in facts:
                yield Tagged(FACTS, fact)
        plan = self._plans.get(batch.split)  # none: every record of the split was a duplicate
        if plan is None or plan.error is not None:
            return
        num_shards, total = plan.num_shards, plan.fact.num_records
        if in_place(self._config, batch.url):
            # The records stay where Parse wrote them. Each shard gets one piece in all, from the
            # batch ``shard mod B`` of its split's B batches, naming the list of them that the
            # split's first batch writes here (WriteShards runs once every Assign has ended).
            ordinal = plan.counts.ordinal(batch.split, tuple(batch.unit), batch.part)
            lo, hi = plan.counts.bounds(batch.split)
            listing = listing_url(self._config, batch.split)
            if ordinal == 0:
                write_listing(listing, plan.counts.batches(batch.split))
            for shard in range(ordinal, num_shards, hi - lo):
                yield shard_key(batch.split, shard, num_shards), ShardBatches(listing, total)
            return
        # Remote or large spill: reorder the batch by (shard, order) once and spill it; each shard's
        # piece is then one byte range of that file.
        n, first = batch.num_records, plan.counts.first_position(batch.split, tuple(batch.unit), batch.part)
        if not n:  # every record of the batch was a duplicate
            return
        shard, order = self._shards(plan, first, n)
        by_shard = np.lexsort((order, shard))
        sorted_shard = shard[by_shard]
        bounds = [0, *(np.flatnonzero(np.diff(sorted_shard)) + 1).tolist(), n]
        ranges = reorder(batch, sorted_url(self._config, batch), by_shard, bounds)
        for lo, (start, end) in zip(bounds, ranges):
            key = shard_key(batch.split, int(sorted_shard[lo]), num_shards)
            yield key, ShardPiece(sorted_url(self._config, batch), start, end, first, n, total, False)

    @staticmethod
    def _shards(plan: SplitPlan, first: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        """(shard, order within it) of the records of a batch whose first position is ``first``."""
        index = np.arange(first, first + n, dtype=np.uint64)
        position = plan.permutation(index) if plan.permutation is not None else index
        return planning.shard_of(position, np.uint64(plan.num_shards))


class WriteShards:
    """One shard's pieces in; the shard file, its records in order, and a ShardFact out.

    The shard's records are those whose permuted positions it is dealt (``planning.positions_of``),
    found from the positions by the permutation's inverse: each piece's batch holds a range of
    those indices. Each piece's records are read (in file order, in place), then one gather puts
    the shard in its order. The work is O(records of the shard), and nothing per record came from
    Assign (``graph.elements``).
    """

    # a pool task's shards are stored one while the next is gathered, and all of them before it ends
    # (``flush``): a few tasks per process, of equal work (the shards are balanced), not one shard each
    tasks_per_process = 2

    def __init__(self, config: ReshardConfig) -> None:
        self._config = config
        self._shards = Counter("shards_written")
        self._listings: dict[str, list[ShardPiece]] = {}
        self._writer = writer.ShardWriter()  # stores a shard while the next is gathered; ``flush``
        self._counting = helper(stats_columns.COUNTING_THREAD)  # a shard's statistics, beside the next gather
        self._partial: dict[int, dict] = {}  # split -> feature -> the statistics of its shards since ``flush``

    def process(self, item: tuple[tuple[int, int, int], Iterable[ShardPiece]]) -> Iterator[ShardFact]:
        (split, shard, num_shards), pieces = item
        pieces = [x for p in pieces for x in (self._listed(split, p) if isinstance(p, ShardBatches) else (p,))]
        pieces = sorted({p.first: p for p in pieces}.values(), key=lambda p: p.first)  # a batch's piece once
        index = self._indices(split, shard, num_shards, pieces[0].total)
        placed = []
        for piece, mine in zip(pieces, _per_piece(pieces, index, f"shard {shard} of split {split}")):
            if not len(mine):
                continue
            if piece.in_place:  # records in place in a local spill file, read in file order
                starts, stops = record_bounds(piece.url, piece.end, (index[mine] - np.uint64(piece.first)).astype(np.int64))
                placed.append(Placed(mine, starts, stops - starts, url=piece.url))
            else:  # the batch's segment for this shard: its records in shard order
                blob, piece_ends = segment(fs.read_bytes(piece.url, piece.start, piece.end), len(mine))
                starts = np.concatenate(([0], piece_ends[:-1])).astype(np.int64)
                placed.append(Placed(np.sort(mine), starts, piece_ends.astype(np.int64) - starts, data=blob))
        name = self._config.splits[split].name
        path = naming.shard_path(self._config.run_id, name, shard, num_shards, gzip=self._config.gzip)
        framed, record_ends = place(placed, len(index))
        del placed
        info = self._writer.write(self._config.output, path, framed, len(index), compress=self._config.gzip,
                                  ends=record_ends)
        if self._recounts():
            self._counting.submit(stats_columns.add_framed, self._partial.setdefault(split, {}), framed, record_ends,
                                  self._config.schema)
        self._shards.inc()
        log.debug("wrote %s: %d records, %d bytes", path, info.num_records, info.num_bytes)
        yield ShardFact(split, shard, num_shards, info)

    def flush(self) -> list[Tagged]:
        """Waits until every shard this wrote is stored (and raises an error of storing one): the end
        of a bundle or a pool task, before its ShardFacts can reach the commit. Then the statistics
        of the shards since the last flush, per split (tag ``STATS``): one partial for many shards,
        which (a bundle's shards over its splits' caps) holds sketches rather than exact counts."""
        self._writer.flush()
        self._counting.wait()
        partial, self._partial = self._partial, {}
        key = (lambda split: split) if not self._config.statistics_in_parse else written_key
        return [Tagged(STATS, (key(split), partial[split])) for split in sorted(partial)]

    def _recounts(self) -> bool:
        """Whether this counts the statistics of the shards it writes: where Parse does not, or where
        ``--dedup exact`` dropped records Parse counted (``graph.duplicates.dropped_any``)."""
        cfg = self._config
        return cfg.statistics and (not cfg.statistics_in_parse or (cfg.dedup == "exact" and dropped_any(cfg)))

    def teardown(self) -> None:
        try:
            self._writer.close()
        finally:
            self._counting.close()

    def __getstate__(self) -> dict:  # pickled for the workers (pipelines.pool): without the cache
        return {**self.__dict__, "_listings": {}, "_writer": None, "_counting": None, "_partial": {}}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state, _writer=writer.ShardWriter(),
                             _counting=helper(stats_columns.COUNTING_THREAD))

    def _listed(self, split: int, batches: ShardBatches) -> list[ShardPiece]:
        """The pieces in place of a split's listed batches (read once per process)."""
        if batches.url not in self._listings:
            self._listings = {batches.url: read_listing(self._config, split, batches.url, batches.total)}
        return self._listings[batches.url]

    def _indices(self, split: int, shard: int, num_shards: int, total: int) -> np.ndarray:
        """The split's record indices, in order, that shard ``shard`` of ``num_shards`` takes."""
        positions = planning.positions_of(shard, num_shards, total)
        perm = permutation(self._config, split, total)
        return positions if perm is None else perm.inverse(positions)


def _per_piece(pieces: list[ShardPiece], index: np.ndarray, what: str) -> list[np.ndarray]:
    """For each piece (in order of first position, one per batch), the places in the shard of the
    records of ``index`` (the shard's record indices, in its order) that its batch holds, in index
    order: one sort of the indices, the batches being consecutive ranges of them."""
    by_index = np.argsort(index)
    ordered = index[by_index]
    firsts = np.array([p.first for p in pieces], np.uint64)
    starts = np.searchsorted(ordered, firsts)
    stops = np.searchsorted(ordered, firsts + np.array([p.num_records for p in pieces], np.uint64))
    if starts[0] != 0 or stops[-1] != len(index) or (stops[:-1] != starts[1:]).any():
        raise RuntimeError(f"{what}: a record's batch sent no piece: the plan is inconsistent")
    return [by_index[lo:hi] for lo, hi in zip(starts.tolist(), stops.tolist())]


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


def written_key(split: int) -> int:
    """The Stats key of a split's statistics counted from its written shards where Parse counts them
    too (``--dedup exact``), and back: ``-1 - split``."""
    return -1 - split


class MergeStats:
    """``(split index, partials)`` in; that split's ``StatsFact`` out. Parse's per-unit partial
    statistics are exact (``shardprep.stats.feature_stats``), so the merged result is the same whatever grouping
    and order the engine uses: ``merge`` adds two (an engine may merge them as they arrive, as
    Beam's combiner lifting does), ``finish`` turns a split's merged result into its fact."""

    def __init__(self, config: ReshardConfig) -> None:
        self._config = config
        if any(spec.dtype == "string" for spec in config.schema.values()):
            # built before a local pool forks: its processes, which count the strings, share the import
            distinct.load_counting()

    @staticmethod
    def merge(accumulator: dict, partial: dict) -> dict:
        return feature_stats.merge(accumulator, partial)

    def finish(self, key: int, merged: dict) -> StatsFact:
        """The split's statistics, and their mergeable state stored for a later append (``stats.state``).
        Under ``--dedup exact`` with statistics counted in Parse, the key of WriteShards' partials is
        ``written_key(split)``: where the run dropped records those replace Parse's, whose fact then
        holds no statistics (``statistics`` None: the commit leaves it out)."""
        cfg = self._config
        split = key if key >= 0 else written_key(key)
        if key >= 0 and cfg.statistics_in_parse and cfg.dedup == "exact" and dropped_any(cfg):
            return StatsFact(split, None)
        sketch = stats_state.write(cfg.output, cfg.run_id, cfg.splits[split].name, merged)
        return StatsFact(split, feature_stats.to_json(merged, cfg.schema, top_k=cfg.stats_top_k), sketch)

    def process(self, item: tuple[int, Iterable[dict]]) -> Iterator[StatsFact]:
        split, partials = item
        yield self.finish(split, functools.reduce(feature_stats.merge, partials, {}))


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
