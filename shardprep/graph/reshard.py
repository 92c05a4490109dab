"""The re-shard as one Beam transform: work units in, committed data set out.

Graph (every step has a stable label)::

    Units -> ExpandUnits -> Distribute -> CountRanges ----------.(side input)      (Distribute: not in process)
                             '-> Parse --records--> Assign(side input: Count) -> GroupByShard -> WriteShards --+
                                   |--rejected--> GroupRejected -> WriteRejected --------------------------+
                                   |--stats--> Stats (CombinePerKey by split) -----------------------------+
                                   '--facts----------------------------------------------------------------+-> Gather -> Commit

One element carries a batch of records, never a single record, and the record bytes themselves
wait between stages in spill files under the run folder (removed at commit): the runner moves only
(url, byte range, record ends), so its coders and memory carry small elements whatever the data
size (``graph.elements``). Positions come from prefix sums of per-unit counts (a side input keyed
by unit, de-duplicated and cross-checked at commit) and a keyed bijection, so the output depends
only on the input and the seed. ``Parse`` takes ``CountRanges`` as a side input: the quote and
newline counts of each nominal byte range of a large CSV / JSON Lines file (``graph.ranges``),
from which it finds those units' cuts and line numbers. Every branch ends in ``Commit``: runners
that evaluate only the last step (Beam's Dask runner) still run all of them. Where Beam runs in
the launcher, CountRanges, Parse, Assign and WriteShards run on a pool (``graph.pool``: local
processes, or a Dask cluster's workers), which may have begun them before this graph was built (``graph.work``). Each
step's work is Beam-free (``graph.parse`` ... ``graph.units``); ``graph.dofns`` makes it a DoFn.

The graph's size does not grow with the input: the work units and the input list are staged in
the run folder (``graph.units``), ``Units`` holds only chunk numbers (at most ``MAX_CHUNKS``),
``ExpandUnits`` reads each chunk's units, and every DoFn carries the config without the input
list; the commit reads that list back from the staged file.
"""
from __future__ import annotations

import apache_beam as beam

from shardprep.config import ReshardConfig
from shardprep.formats import WorkUnit
from shardprep.graph.dofns import InLine, pooled
from shardprep.graph.elements import FACTS, REJECTED, STATS
from shardprep.graph.spill import count
from shardprep.graph.stages import Commit, WriteRejected
from shardprep.graph.stats import CombineStats
from shardprep.graph.units import ExpandUnits, slim, stage
from shardprep.graph.work import steps

__all__ = ["Reshard"]


class Reshard(beam.PTransform):
    """Work units in; shards, dead letters and the manifest (or a failure report) out.

    Returns a PCollection holding the URL of the manifest or of the report.
    """

    def __init__(self, config: ReshardConfig, units: list[WorkUnit], pool: str | None = None,
                 in_process: bool = False) -> None:
        super().__init__()
        self._config = config
        self._units = units
        self._pool = pool  # a ``graph.pool`` token: the working steps run on its processes
        # Beam's in-process runner: no Distribute, which only spreads the units over a distributed
        # runner's workers (~0.15 s of Beam's graph work a run, for five steps)
        self._in_process = in_process

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.PCollection:
        staged, chunks = stage(self._config, self._units)  # DIR/<run-id>/units.bin, before any worker starts
        cfg = slim(self._config)
        work = steps(self._config)
        units = (
            pbegin
            | "Units" >> beam.Create(list(range(chunks)))
            | "ExpandUnits" >> beam.ParDo(InLine(ExpandUnits(staged)))
        )
        if not self._in_process:
            units = units | "Distribute" >> beam.Reshuffle()
        # nominal units' quote and newline counts: their cuts and first lines (formats.cuts)
        ranges = units | "CountRanges" >> beam.ParDo(pooled(work.count_ranges, self._pool))
        parsed = units | "Parse" >> beam.ParDo(pooled(work.parse, self._pool), beam.pvalue.AsList(ranges)).with_outputs(
            REJECTED, FACTS, STATS, main="records")
        counts = parsed.records | "Count" >> beam.Map(count)
        assigned = parsed.records | "Assign" >> beam.ParDo(
            pooled(work.assign, self._pool), beam.pvalue.AsList(counts)).with_outputs(FACTS, main="pieces")
        shard_facts = (
            assigned.pieces
            | "GroupByShard" >> beam.GroupByKey()
            | "WriteShards" >> beam.ParDo(pooled(work.write, self._pool))
        )
        reject_facts = (
            parsed[REJECTED]
            | "KeyRejected" >> beam.Map(lambda batch: (0, batch))
            | "GroupRejected" >> beam.GroupByKey()
            | "WriteRejected" >> beam.ParDo(InLine(WriteRejected(cfg)))
        )
        facts = [parsed[FACTS], assigned[FACTS], shard_facts, reject_facts]
        if cfg.statistics:  # Parse emits partial statistics only then; without them, three steps fewer
            facts.append(parsed[STATS] | "Stats" >> CombineStats(cfg))
        return (
            tuple(facts)
            | "AllFacts" >> beam.Flatten()
            | "KeyFacts" >> beam.Map(lambda fact: (None, fact))
            | "Gather" >> beam.GroupByKey()
            | "Commit" >> beam.ParDo(InLine(Commit(cfg, staged)))
        )
