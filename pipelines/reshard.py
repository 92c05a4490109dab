"""Builds and runs the re-shard job on a chosen runner: the one place a Beam pipeline is created.

The graph itself is ``shardprep.graph.Reshard``; this module only turns a runner name and
Beam's own flags into PipelineOptions, starts a local Dask cluster when asked, and waits. The
command-line entry point (``shardprep.run``) parses flags and calls ``run``; nothing here
imports an entry point.
"""
from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Sequence

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, TestOptions

from shardprep.config import ReshardConfig
from shardprep.errors import UsageError
from shardprep.formats import WorkUnit
from shardprep.graph import Reshard

__all__ = ["RUNNERS", "build", "run"]

RUNNERS = ("direct", "dask", "dataflow", "flink", "spark", "portable")
_PORTABLE = {"flink": "FlinkRunner", "spark": "SparkRunner", "portable": "PortableRunner"}
log = logging.getLogger("shardprep")


def build(pipeline: beam.Pipeline, config: ReshardConfig, units: Sequence[WorkUnit]) -> beam.PCollection:
    """Adds the re-shard to ``pipeline`` (tests pass a TestPipeline)."""
    return pipeline | "Reshard" >> Reshard(config, list(units))


@contextlib.contextmanager
def _dask_cluster(address: str | None, workers: int | None) -> Iterator[str]:
    """Yields a scheduler address: the given one, or a LocalCluster started for this run."""
    if address:
        yield address
        return
    from distributed import LocalCluster

    n = workers or os.cpu_count() or 1
    log.info("starting a Dask LocalCluster with %d worker processes", n)
    with LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address="127.0.0.1:0") as cluster:
        log.info("Dask scheduler %s, dashboard %s", cluster.scheduler_address, cluster.dashboard_link)
        yield cluster.scheduler_address


def _options(runner: str, beam_args: Sequence[str], dask_address: str | None, num_units: int) -> PipelineOptions:
    args = list(beam_args)
    if runner == "direct":
        args = ["--runner=DirectRunner", *args]
    elif runner == "dask":
        args = [f"--dask_client_address={dask_address}", *args]
        if not any(a.startswith(("--dask_npartitions", "--dask_partition_size")) for a in args):
            # Beam's Dask runner puts up to 128 units in one partition (one task); one unit per
            # partition is what Reshuffle gives on other runners.
            args.append(f"--dask_npartitions={max(1, min(num_units, 4096))}")
    elif runner == "dataflow":
        from pipelines.dataflow_flags import dataflow_args

        args = ["--runner=DataflowRunner", *dataflow_args(args)]
    elif runner in _PORTABLE:  # Beam's portable runners: --flink_master, --spark_master_url or --job_endpoint
        args = [f"--runner={_PORTABLE[runner]}", *args]
    else:
        raise UsageError(f"--runner {runner!r}: expected one of {', '.join(RUNNERS)}")
    return PipelineOptions(args)


def run(
    config: ReshardConfig,
    units: Sequence[WorkUnit],
    *,
    runner: str = "direct",
    beam_args: Sequence[str] = (),
    dask_address: str | None = None,
    dask_workers: int | None = None,
) -> bool:
    """Runs the re-shard to completion (the commit step writes the manifest or a report).

    Returns False when nothing ran: a Dataflow ``--dry_run=True`` only builds the job graph.
    """
    with contextlib.ExitStack() as stack:
        beam_runner = None
        if runner == "dask":
            from pipelines.dask_runner import DaskRunner

            dask_address = stack.enter_context(_dask_cluster(dask_address, dask_workers))
            beam_runner = DaskRunner()
        options = _options(runner, beam_args, dask_address, len(units))
        if runner == "dataflow":
            from pipelines.dataflow_flags import check_locations

            check_locations(config.output, sorted({unit.file.url for unit in units}))
        pipeline = beam.Pipeline(runner=beam_runner, options=options)
        build(pipeline, config, units)
        result = pipeline.run()
        if runner == "dask":
            stack.callback(result.client.close)  # before the cluster it talks to goes away
        if runner == "dataflow" and options.view_as(TestOptions).dry_run:
            log.info("dry run: the Dataflow job graph of run %s was built and not submitted", config.run_id)
            return False
        result.wait_until_finish()
        return True
