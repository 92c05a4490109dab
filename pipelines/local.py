"""The local engine (``--runner direct``, the default): the job on this machine's processes.

By default the re-shard uses every core this process may run on (``os.sched_getaffinity``): the
job's heavy stages (CountRanges, Parse, Assign, WriteShards) fan out to a pool of processes forked
from the launcher (``graph.pool``), the rest runs in the launcher (``pipelines.driver``). Nothing
imports Beam: a run starts on its data as soon as it is planned. Inputs under ``TINY_BYTES`` or
of a single work unit run in this process. The output does not depend on the count: positions
come from the counts side input, never from scheduling. A stage's elements are dealt to the
processes a few at a time, so a run balances when it has several work units per process
(``--unit-mb``).

Beam's ``--direct_num_workers=N`` (with or without ``--direct_running_mode``) means ``--local-workers
N`` here (``direct_flags``): the flags users of Beam's DirectRunner know keep working. This module
also prints the run's one-line summary (``summarize``).
"""
from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Sequence

from pipelines.driver import run_job
from pipelines.engines import RunOptions
from shardprep import run_checks
from shardprep.capacity import machine_cores
from shardprep.config import ReshardConfig
from shardprep.errors import UsageError
from shardprep.formats import WorkUnit
from shardprep.graph import pool, units
from shardprep.job import reshard_job

__all__ = ["TINY_BYTES", "LocalEngine", "direct_flags", "plan_workers", "summarize"]

# Below this, one process: the work is all start-up, and the pool adds ~0.3 CPU s for no wall time (3 files of 100
# rows: 1.72 s median either way). Above it the pool parses while Beam is imported: 2.5 MB of CSV in 3 files
# 4.2 -> 3.2 s, 20,000 small images (22 MB, 40 units) 3.4-5.9 -> 2.6-2.9 s (it was 64 MB before the pool forked
# ahead of Beam's import, when the images took 0.5 s longer with it).
TINY_BYTES = 1 << 20
_DIRECT_FLAGS = ("--direct_num_workers", "--direct_running_mode")
_MODES = ("in_memory", "multi_threading", "multi_processing")  # Beam's; each means this pool here
log = logging.getLogger("shardprep")


class LocalEngine:
    """``--runner direct``: this machine's processes (``pipelines.engines.Engine``)."""

    def checked(self, options: RunOptions) -> RunOptions:
        local_workers, rest = direct_flags(options.beam_args, options.local_workers)
        run_checks.refuse_unknown_args(rest, beam=False)
        return options._replace(local_workers=local_workers, beam_args=())

    def on_this_machine(self, options: RunOptions) -> bool:
        return True

    def run(self, config: ReshardConfig, units_: Sequence[WorkUnit], options: RunOptions) -> bool:
        count = plan_workers(requested=options.local_workers, input_bytes=sum(size for _, size in config.sources),
                             num_units=len(units_), cores=machine_cores())
        job = reshard_job(config, len(units_))
        units.stage(config, units_)
        started = time.monotonic()
        with contextlib.ExitStack() as stack:
            workers = None
            if count > 1:
                log.info("direct runner: %d worker processes (--local-workers to choose)", count)
                workers = stack.enter_context(pool.local_pool(count))
            _, counters = run_job(job, workers)
        summarize(counters, workers=count, seconds=time.monotonic() - started)
        return True


def plan_workers(*, requested: int | None, input_bytes: int, num_units: int, cores: int) -> int:
    """Pool processes for the direct runner: ``requested`` if given, else one per core for
    inputs worth it (at most one per work unit), else 1 (no pool)."""
    if requested is not None:
        if requested < 1:
            raise UsageError(f"--local-workers {requested}: expected 1 or more (e.g. --local-workers {cores})")
        return requested
    if num_units <= 1 or input_bytes < TINY_BYTES:
        return 1
    return max(1, min(cores, num_units))


def direct_flags(args: Sequence[str], local_workers: int | None) -> tuple[int | None, list[str]]:
    """The direct runner's process count, and the Beam flags left once Beam's own ``--direct_*`` flags
    are taken out of ``args``: ``--direct_num_workers=N`` is ``--local-workers N`` (0: one per core, as
    in Beam), whatever ``--direct_running_mode`` says; the pool runs them, never Beam's SDK workers."""
    rest: list[str] = []
    values: dict[str, str] = {}
    items = iter(args)
    for arg in items:
        name, eq, value = arg.partition("=")
        if name not in _DIRECT_FLAGS:
            rest.append(arg)
            continue
        values[name] = value if eq else next(items, "")
    mode = values.get("--direct_running_mode", "in_memory")
    if mode not in _MODES:
        raise UsageError(f"--direct_running_mode {mode!r}: expected one of {', '.join(_MODES)}")
    if "--direct_num_workers" not in values:
        return local_workers, rest
    text = values["--direct_num_workers"]
    if not text.isdigit():
        raise UsageError(f"--direct_num_workers {text!r}: expected a count (e.g. --direct_num_workers={machine_cores()})")
    count = int(text) or machine_cores()
    if local_workers is not None and local_workers != count:
        raise UsageError(f"--local-workers {local_workers} and --direct_num_workers={text} ask for different process "
                         "counts: give one of them")
    return count, rest


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
