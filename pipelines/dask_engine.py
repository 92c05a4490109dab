"""The Dask engine (``--runner dask``): the job's heavy stages as tasks on a Dask cluster's workers
(``pipelines.dask_cluster``: ``--dask-address``, or a ``LocalCluster`` of ``--dask-workers``
processes started for the run), the rest in the launcher (``pipelines.driver``). It goes through
Dask's public API only (``Client.get_executor``, ``Client.run``), and neither the launcher nor a
worker imports Beam.

Elements between stages are small (work units, references to spilled batches, a few numbers per
shard where the spill is read in place); where it is not (workers of other machines), Assign
gives a piece per batch and shard, which the launcher holds until WriteShards: about 100 bytes
each (``graph.elements.ShardPiece``).
"""
from __future__ import annotations

import time
from collections.abc import Sequence

from pipelines import dask_cluster
from pipelines.driver import run_job
from pipelines.engines import RunOptions
from pipelines.local import summarize
from shardprep import run_checks
from shardprep.capacity import machine_cores
from shardprep.config import ReshardConfig
from shardprep.formats import WorkUnit
from shardprep.graph import units
from shardprep.job import reshard_job

__all__ = ["DaskEngine"]


class DaskEngine:
    """``--runner dask`` (``pipelines.engines.Engine``)."""

    def checked(self, options: RunOptions) -> RunOptions:
        run_checks.refuse_unknown_args(options.beam_args, beam=False)
        return options._replace(beam_args=())

    def on_this_machine(self, options: RunOptions) -> bool:
        return options.dask_address is None or dask_cluster.on_this_machine(options.dask_address)

    def run(self, config: ReshardConfig, units_: Sequence[WorkUnit], options: RunOptions) -> bool:
        job = reshard_job(config, len(units_))
        units.stage(config, units_)
        count = options.dask_workers or machine_cores()
        started = time.monotonic()
        with dask_cluster.workers(config, address=options.dask_address, workers=count) as workers:
            _, counters = run_job(job, workers)
        summarize(counters, workers=0 if options.dask_address else count, seconds=time.monotonic() - started)
        return True
