"""Builds and runs the re-shard job on a chosen runner: the one place a Beam pipeline is created.

The graph itself is ``shardprep.graph.Reshard``; this module only turns a runner name and
Beam's own flags into PipelineOptions and waits (the run's local workers, a local Dask cluster
among them, come from ``pipelines.local.worker_pool``). The command-line entry point
(``shardprep.run``) parses flags and calls ``run``; nothing here imports an entry point.
"""
from __future__ import annotations

import contextlib
import errno
import logging
import time
from collections.abc import Sequence

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, TestOptions
from apache_beam.runners.runner import PipelineResult

from pipelines import local
from pipelines.startup import RUNNERS
from shardprep import retention
from shardprep.config import ReshardConfig
from shardprep.errors import InputError, RunError, UsageError
from shardprep.formats import WorkUnit
from shardprep.graph import spill
from shardprep.graph.pool import stop as stop_pool
from shardprep.graph.reshard import Reshard
from shardprep.graph.units import num_chunks

__all__ = ["RUNNERS", "build", "run"]

_PORTABLE = {"flink": "FlinkRunner", "spark": "SparkRunner", "portable": "PortableRunner"}
log = logging.getLogger("shardprep")


def build(pipeline: beam.Pipeline, config: ReshardConfig, units: Sequence[WorkUnit],
          pool: str | None = None, in_process: bool = False) -> beam.PCollection:
    """Adds the re-shard to ``pipeline`` (tests pass a TestPipeline); ``pool``, ``in_process``: see ``Reshard``."""
    return pipeline | "Reshard" >> Reshard(config, list(units), pool, in_process)


def _options(runner: str, beam_args: Sequence[str], dask_address: str | None, num_units: int) -> PipelineOptions:
    args = list(beam_args)
    if runner == "direct":
        args = ["--runner=DirectRunner", *args]
    elif runner == "dask":
        args = [*([f"--dask_client_address={dask_address}"] if dask_address else []), *args]
        if not any(a.startswith(("--dask_npartitions", "--dask_partition_size")) for a in args):
            # Beam's Dask runner puts up to 128 elements in one partition (one task); one chunk of
            # units (graph.units: one unit each up to MAX_CHUNKS) per partition is what Reshuffle
            # gives on other runners.
            args.append(f"--dask_npartitions={num_chunks(num_units)}")
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
    local_workers: int | None = None,
    workers: local.Workers | None = None,
) -> bool:
    """Runs the re-shard to completion (the commit step writes the manifest or a report).

    ``local_workers``: processes of the direct runner (default: one per core, one for tiny inputs;
    ``pipelines.local``; Beam's ``--direct_num_workers`` means the same); ``dask_workers``: those of
    the local Dask cluster started when there is no ``dask_address``; ``workers``: those the caller
    started already (``local.worker_pool``, before Beam's import).
    Returns False when nothing ran: a Dataflow ``--dry_run=True`` only builds the job graph.
    """
    if runner == "direct":
        local_workers, beam_args = local.direct_flags(beam_args, local_workers)
    with contextlib.ExitStack() as stack:
        beam_runner, input_bytes = None, sum(size for _, size in config.sources)
        if workers is None:
            workers = stack.enter_context(local.worker_pool(config, units, runner=runner, local_workers=local_workers,
                                                            dask_address=dask_address, dask_workers=dask_workers))
        pool, in_process = workers.pool, local.beam_in_process(runner, config)
        options = _options(runner, beam_args, dask_address, len(units))
        if in_process:  # the steps on a pool: the local one, or a Dask cluster's workers
            beam_runner = local.in_process_runner(options)
        elif runner == "dask":
            from pipelines.dask_runner import DaskRunner

            beam_runner = DaskRunner(address=None if dask_address else workers.dask_address)
        if runner == "dataflow":
            from pipelines.dataflow_flags import check_locations

            check_locations(config.output, sorted({unit.file.url for unit in units}))
        pipeline = beam.Pipeline(runner=beam_runner, options=options)
        build(pipeline, config, units, pool, in_process=in_process)
        started = time.monotonic()
        try:
            result = _run_and_wait(pipeline, runner, options, stack)
        except BaseException as e:  # the caller removes the run's folder (shardprep.interrupts), the pool stopped
            _stop(pool)
            if not _out_of_space(e):
                raise
            raise RunError(
                f"no space left on the device of {config.output}: this run needs about "
                f"{_space_needed(units) / 1e6:,.1f} MB free there (its shards plus one copy of them in spill, for "
                f"{input_bytes / 1e6:,.1f} MB of input); its files were removed; free space or choose another "
                f"--output and rerun") from e
        if result is None:
            retention.discard_run(config.output, config.run_id, whole=True)  # the staged units (graph.units)
            log.info("dry run: the Dataflow job graph of run %s was built and not submitted", config.run_id)
            return False
        if runner in ("direct", "dask"):
            local.summarize(result, config, workers=0 if dask_address else workers.count,
                            seconds=time.monotonic() - started)
        return True


def _space_needed(units: Sequence[WorkUnit]) -> int:
    files = list({unit.file.index: unit.file for unit in units}.values())
    try:
        return spill.run_space(files)
    except (OSError, InputError):  # a Parquet footer that cannot be read now: the estimate from sizes
        return spill.RUN_SPACE_FACTOR * sum(f.size for f in files)


def _stop(pool: str | None) -> None:
    """Ends the local pool before the run's files go: none of its processes writes after that."""
    if pool is not None:
        stop_pool(pool)


def _run_and_wait(pipeline: beam.Pipeline, runner: str, options: PipelineOptions,
                  stack: contextlib.ExitStack) -> PipelineResult | None:
    """Runs the pipeline to the end; None for a Dataflow dry run (nothing submitted)."""
    result = pipeline.run()
    if hasattr(result, "client"):  # Beam's graph on a Dask cluster
        stack.callback(result.client.close)  # before the cluster it talks to goes away
    if runner == "dataflow" and options.view_as(TestOptions).dry_run:
        return None
    try:
        result.wait_until_finish()
    except KeyboardInterrupt:  # a job of a service runs on without this process: stop it
        if runner == "dataflow" or runner in _PORTABLE:
            _cancel(result)
        raise
    return result


def _cancel(result: PipelineResult) -> None:
    job = getattr(result, "job_id", lambda: "")()
    try:
        result.cancel()
        log.warning("cancelled job %s: the run was interrupted", job)
    except Exception as e:  # noqa: BLE001 - the interrupt stands; the user is told what to do
        log.warning("could not cancel job %s (%s): cancel it in its runner's console; it commits nothing, "
                    "since this run's folder is claimed for removal", job, e)


def _out_of_space(error: BaseException) -> bool:
    """Whether ``error`` is, or wraps, a full disk (a worker's error reaches here as text)."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno == errno.ENOSPC:
            return True
        if f"[Errno {errno.ENOSPC}]" in str(seen) or "No space left on device" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
