"""Runs the re-shard graph on a chosen runner.

The graph itself is ``shardprep.transforms.Reshard``; this module only turns a runner name and
Beam's own flags into PipelineOptions, starts a local Dask cluster when asked, and waits.
"""
from __future__ import annotations

import contextlib
import logging
import os
from typing import Iterator, Sequence

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from shardprep.config import ReshardConfig
from shardprep.sources import WorkUnit
from shardprep.transforms import Reshard

__all__ = ["RUNNERS", "build", "run"]

RUNNERS = ("direct", "dask", "dataflow")
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
    with LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        yield cluster.scheduler_address


def _options(runner: str, beam_args: Sequence[str], dask_address: str | None) -> PipelineOptions:
    args = list(beam_args)
    if runner == "direct":
        args = ["--runner=DirectRunner", *args]
    elif runner == "dask":
        from apache_beam.runners.dask.dask_runner import DaskRunner  # noqa: F401 (fails early if not installed)

        args = ["--runner=apache_beam.runners.dask.dask_runner.DaskRunner", f"--dask_client_address={dask_address}", *args]
    elif runner == "dataflow":
        args = ["--runner=DataflowRunner", *args]
    else:
        raise ValueError(f"--runner {runner!r}: expected one of {', '.join(RUNNERS)}")
    return PipelineOptions(args)


def run(
    config: ReshardConfig,
    units: Sequence[WorkUnit],
    *,
    runner: str = "direct",
    beam_args: Sequence[str] = (),
    dask_address: str | None = None,
    dask_workers: int | None = None,
) -> None:
    """Runs the re-shard to completion (the commit step writes the manifest or a report)."""
    with contextlib.ExitStack() as stack:
        if runner == "dask":
            dask_address = stack.enter_context(_dask_cluster(dask_address, dask_workers))
        options = _options(runner, beam_args, dask_address)
        pipeline = beam.Pipeline(options=options)
        build(pipeline, config, units)
        result = pipeline.run()
        result.wait_until_finish()
