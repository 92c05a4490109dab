"""Beam's Dask runner (``apache_beam.runners.dask``, Beam 2.77) with the fixes this product needs.

A re-shard sends its graph here only where its spill is not in place (a scheduler of another
machine, or a spill larger than half the free memory: ``pipelines.local.beam_in_process``); a run
on a cluster of this machine keeps Beam in the launcher and runs the steps on the workers
(``pipelines.dask_cluster.pool``).

Beam's translation turns each leaf transform into one ``dask.bag`` and, as shipped:

1. gives every consumer of a multi-output ``ParDo`` the bag of *all* its outputs, so the main
   output, the dead letters and the facts arrive mixed at every branch (seen: ``WriteRejected``
   received record batches and the run failed);
2. collects a ParDo's outputs in one receiver list that is part of the task graph, so every
   partition a process runs returns the outputs of the partitions it ran before as well (seen:
   a Flatten of 4 elements gave 8 with Dask's synchronous scheduler and 56 with its threads; the
   "every chunk's count three times" side input);
3. feeds each ParDo a lazy ``map`` over its input partition under a key that every consumer of the
   same PCollection shares, so the first consumer in a process can drain the iterator the next one
   reads (seen: a side input built from a Flatten lost a partition);
4. materialises a side input with ``list(bag)`` *inside* each consuming task, a nested compute
   from within a worker that recomputes the side input's upstream once per partition;
5. computes only the bag of the last transform visited, so a branch that does not lead into it
   never runs.

And it costs: every task costs the scheduler and a worker ~3 ms of CPU besides its work, and
Beam's translation made 2,176 tasks of 12 work units (Dask's ``concat`` adds partition counts up,
its ``groupby`` shuffle is ~n*n small tasks, and each fused chain keeps an alias task), while a side
input handed over as a Dask ``Item`` was optimised as a graph of its own, so everything upstream
of it (Parse, its spill files) ran twice. 190 MB of CSV took 4.5x the one-process CPU; now
2.5x with a LocalCluster started for the run, 2.1x on a standing cluster (BENCHMARKS.md, "Dask:
where the CPU goes").

Here ``pipelines.dask_graph`` translates: every ``ParDo`` call collects into a fresh list of
``(tag, element)`` pairs and each consumer selects its own tag inside its own task; a side input
is one task of the same graph (computed once, handed to every task as a list); a Flatten keeps
partition i in partition i; a GroupByKey is one exchange of hashed buckets (``BUCKETS_PER_THREAD``
output partitions per worker thread); linear chains are fused into one task under the last key;
and every sink (a bag nobody consumes) is computed. The same 12 units on 2 worker threads: 110 tasks, each step once
per partition. Elements keep Beam's global window only: this runner is for batch pipelines. Like
Beam's, it reports no metrics. What stays is per worker process (importing Beam and shardprep,
distributed's event loop; a few CPU seconds) and per task: size a cluster from the DoFn work
(``BENCHMARKS.md``: CPU s per GB) and give it several work units per worker thread.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from apache_beam.runners.dask import dask_runner as beam_dask
from apache_beam.runners.dask.overrides import dask_overrides

from pipelines.dask_graph import Visitor, fused

__all__ = ["BUCKETS_PER_THREAD", "DaskRunner"]

log = logging.getLogger("shardprep")
BUCKETS_PER_THREAD = 2  # a GroupByKey's output partitions per worker thread: balance vs tasks and data moved


class DaskRunner(beam_dask.DaskRunner):
    """Runs a batch pipeline on a ``dask.distributed`` cluster: ``--dask_client_address``, or
    ``address()``, asked once the graph is built (``pipelines.dask_cluster``: a cluster still starting).

    The result's ``client`` is open until the caller closes it.
    """

    def __init__(self, address: Callable[[], str] | None = None) -> None:
        super().__init__()
        self._address = address

    def run_pipeline(self, pipeline: Any, options: Any) -> beam_dask.DaskRunnerResult:
        import dask.distributed as ddist

        dask_options = options.view_as(beam_dask.DaskOptions).get_all_options(drop_default=True, current_only=True)
        if self._address is not None and not dask_options.get("address"):  # Beam's own flag, if given, wins
            dask_options["address"] = self._address()
        bag_kwargs = beam_dask.DaskOptions._extract_bag_kwargs(dask_options)
        client = ddist.Client(**dask_options)
        threads = sum(w.get("nthreads", 1) for w in client.scheduler_info()["workers"].values()) or 1
        pipeline.replace_all(dask_overrides())
        visitor = Visitor(bag_kwargs, buckets=BUCKETS_PER_THREAD * threads)
        pipeline.visit(visitor)
        graph, keys = fused(visitor.sinks())
        log.info("Dask: %d tasks for %d steps on %s (%d worker threads)", len(graph), len(visitor.outputs),
                 client.scheduler.address, threads)
        return beam_dask.DaskRunnerResult(client, client.get(graph, keys, sync=False))
