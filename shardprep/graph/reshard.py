"""The re-shard as one Beam transform: work units in, committed data set out.

Graph (every step has a stable label)::

    Units -> Distribute -> Parse --records--> Assign(side input: Count) -> GroupByShard -> WriteShards --+
                             |--rejected--> GroupRejected -> WriteRejected ------------------------------+
                             '--facts-------------------------------------------------------------------+-> Gather -> Commit

One element carries a batch of records, never a single record, and the record bytes themselves
wait between stages in spill files under the run folder (removed at commit): the runner moves only
(url, byte range, record ends), so its coders and memory carry small elements whatever the data
size (``graph.elements``). Positions come from prefix sums of per-unit counts (a side input keyed
by unit, de-duplicated and cross-checked at commit) and a keyed bijection, so the output depends
only on the input and the seed. Every branch ends in ``Commit``: runners that evaluate only the
last step (Beam's Dask runner) still run all of them.
"""
from __future__ import annotations

import apache_beam as beam

from shardprep.config import ReshardConfig
from shardprep.formats import WorkUnit
from shardprep.graph.elements import FACTS, REJECTED
from shardprep.graph.parse import Parse
from shardprep.graph.spill import count
from shardprep.graph.stages import Assign, Commit, WriteRejected, WriteShard

__all__ = ["Reshard"]


class Reshard(beam.PTransform):
    """Work units in; shards, dead letters and the manifest (or a failure report) out.

    Returns a PCollection holding the URL of the manifest or of the report.
    """

    def __init__(self, config: ReshardConfig, units: list[WorkUnit]) -> None:
        super().__init__()
        self._config = config
        self._units = units

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.PCollection:
        cfg = self._config
        parsed = (
            pbegin
            | "Units" >> beam.Create(self._units)
            | "Distribute" >> beam.Reshuffle()
            | "Parse" >> beam.ParDo(Parse(cfg)).with_outputs(REJECTED, FACTS, main="records")
        )
        counts = parsed.records | "Count" >> beam.Map(count)
        assigned = parsed.records | "Assign" >> beam.ParDo(Assign(cfg), counts=beam.pvalue.AsList(counts)).with_outputs(
            FACTS, main="pieces"
        )
        shard_facts = (
            assigned.pieces
            | "GroupByShard" >> beam.GroupByKey()
            | "WriteShards" >> beam.ParDo(WriteShard(cfg))
        )
        reject_facts = (
            parsed[REJECTED]
            | "KeyRejected" >> beam.Map(lambda batch: (0, batch))
            | "GroupRejected" >> beam.GroupByKey()
            | "WriteRejected" >> beam.ParDo(WriteRejected(cfg))
        )
        return (
            (parsed[FACTS], assigned[FACTS], shard_facts, reject_facts)
            | "AllFacts" >> beam.Flatten()
            | "KeyFacts" >> beam.Map(lambda fact: (None, fact))
            | "Gather" >> beam.GroupByKey()
            | "Commit" >> beam.ParDo(Commit(cfg))
        )
