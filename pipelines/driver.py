"""Runs a job (``shardprep.job``) stage by stage: the heavy stages' elements on worker processes
(``pipelines.pool.Workers``: this machine's, or a Dask cluster's), the others in this process.

A stage starts once every stage it reads has ended, and its outputs are kept, in element order,
until the last stage that reads them has run. Grouped input is formed here as Beam's GroupByKey
would (``job.groups``: each key once, values in one order), so a stage sees the same elements on
every engine, worker count and rerun. What the stages count comes back with each task's results
(``graph.counting.Tally``) and is summed here. Nothing here imports Beam. ``run_on``: a whole run of
the local or Dask engine.
"""
from __future__ import annotations

import collections
import logging
import time
from collections.abc import Iterator
from concurrent.futures.process import BrokenProcessPool
from contextlib import AbstractContextManager
from typing import Any

from pipelines import pool
from shardprep import malloc
from shardprep.graph.tasks import run_inline
from shardprep.job import BY_KEY, ONE_GROUP, Job, Stage, group_values, groups

__all__ = ["run_job", "run_on", "summarize"]

log = logging.getLogger("shardprep")


def run_on(job: Job, workers: AbstractContextManager[pool.Workers | None], shown: int) -> None:
    """Runs ``job``, staged, on ``workers`` (entered now; None: in this process) and prints its
    summary (``shown`` worker processes)."""
    with workers as started_workers:
        started = time.monotonic()
        _, counters = run_job(job, started_workers)
    summarize(counters, workers=shown, seconds=time.monotonic() - started)


def run_job(job: Job, workers: pool.Workers | None) -> tuple[list, dict[str, int]]:
    """Runs every stage of ``job``; returns the outputs of its result stage (the re-shard's: the URL
    of its manifest or report) and what the stages counted. ``workers``: where the heavy stages run (None: in this process, as everything else)."""
    malloc.keep_freed_memory()  # this process runs stages too (``shardprep.malloc``)
    last_read = {name: i for i, stage in enumerate(job.stages) for name in (*stage.over, *stage.side)}
    outputs: dict[str, list] = {"": list(job.inputs)}
    counted: collections.Counter = collections.Counter()
    for i, stage in enumerate(job.stages):
        elements = _input(stage, outputs)
        side = tuple(outputs[name] for name in stage.side)
        for name in [n for n in outputs if last_read.get(n, -1) <= i]:  # read by no later stage: let go
            del outputs[name]
        for name in (stage.name, *(f"{stage.name}.{tag}" for tag in stage.tags)):
            outputs[name] = []
        began = time.monotonic()
        for tag, value in _run_stage(stage, elements, side, workers, counted):
            outputs[stage.name if tag is None else f"{stage.name}.{tag}"].append(value)
        log.debug("stage %s: %d elements in, %.2f s", stage.name, len(elements), time.monotonic() - began)
    return outputs[job.result], dict(counted)


def _input(stage: Stage, outputs: dict[str, list]) -> list:
    elements = [value for name in stage.over for value in outputs[name]]
    if stage.group == BY_KEY:
        return groups(elements)
    if stage.group == ONE_GROUP:
        return [(0, group_values(elements))] if elements else []  # an empty input makes no group, as in Beam
    return elements


def _run_stage(stage: Stage, elements: list, side: tuple, workers: pool.Workers | None,
               counted: collections.Counter) -> Iterator[tuple[str | None, Any]]:
    if not elements:
        return
    if workers is None or not stage.heavy:
        outputs, tally = run_inline(stage.work, elements, side)
        counted.update(tally)
        yield from outputs
        return
    key, blob = pool.blob_of(stage.work)
    # submitted, not mapped: an interrupt leaves them to the pool's end (``Executor.map`` would cancel
    # them, and a local pool that then finds its processes terminated fails cancelled futures:
    # ``InvalidStateError`` from its thread, Python 3.11); the costliest first where the work says
    # what an element costs (``cost``: a unit's bytes), so that the stage ends on small ones; read in order
    chunks = pool.tasks_of(elements, workers.processes, getattr(stage.work, "tasks_per_process", pool.TASKS_PER_PROCESS))
    cost = getattr(stage.work, "cost", None)
    first = range(len(chunks)) if cost is None else sorted(range(len(chunks)), key=lambda i: -sum(map(cost, chunks[i])))
    submitted = {i: workers.executor.submit(workers.task, (key, blob, chunks[i], side)) for i in first}
    tasks = [submitted[i] for i in reversed(range(len(chunks)))]
    try:
        while tasks:  # each task's results let go once read
            outputs, tally, records = tasks.pop().result()
            counted.update(tally)
            for record in records:
                logging.getLogger(record.name).handle(record)
            yield from outputs
    except BrokenProcessPool as e:  # a process killed (OOM): the run fails, never waits for its task
        raise pool.PoolDied() from e


def summarize(counters: dict[str, int], *, workers: int, seconds: float) -> None:
    """One line per stage from what the run's stages counted (every worker's summed)."""
    if not counters:
        return
    records, rejected = counters.get("records_read", 0), counters.get("records_rejected", 0)
    mb = counters.get("bytes_encoded", 0) / 1e6
    where = f"{workers} worker process{'' if workers == 1 else 'es'}, " if workers else ""  # 0: a cluster's, unknown
    log.info("Parse: %d records read (%d rejected), %.1f MB encoded; %s%.1f s, %.1f MB/s",
             records, rejected, mb, where, seconds, mb / max(seconds, 1e-9))
    if "shards_written" in counters:
        log.info("WriteShards: %d shards written", counters["shards_written"])
