"""The local engine (``--runner direct``, the default): the job on this machine's processes.

By default the job's heavy stages run on a pool of one process per core this process may run on
(``os.sched_getaffinity``), forked from the launcher (``pipelines.pool``), the rest in the launcher
(``pipelines.driver``); inputs under ``TINY_BYTES`` or of a single work unit run in this process.
Nothing imports Beam. The output does not depend on the count (docs/design.md, "Runners and storage").

Beam's ``--direct_num_workers=N`` (with or without ``--direct_running_mode``) means ``--local-workers
N`` here (``run_checks.direct_flags``): the flags users of Beam's DirectRunner know keep working.
"""
from __future__ import annotations

import contextlib
import logging

from pipelines import pool
from pipelines.driver import run_on
from pipelines.engines import RunOptions
from shardprep import run_checks
from shardprep.capacity import machine_cores
from shardprep.errors import UsageError
from shardprep.job import Job

__all__ = ["TINY_BYTES", "LocalEngine", "plan_workers"]

TINY_BYTES = 1 << 20  # below this, one process: all start-up (benchmarks/analysis.md, "One job, three engines")
log = logging.getLogger("shardprep")


class LocalEngine:
    """``--runner direct``: this machine's processes (``pipelines.engines.Engine``)."""

    def checked(self, options: RunOptions) -> RunOptions:
        local_workers, rest = run_checks.direct_flags(options.beam_args, options.local_workers)
        run_checks.refuse_unknown_args(rest, beam=False)
        return options._replace(local_workers=local_workers, beam_args=())

    def on_this_machine(self, options: RunOptions) -> bool:
        return True

    def runs(self, options: RunOptions) -> bool:
        return True

    def run(self, job: Job, options: RunOptions) -> bool:
        input_bytes = sum(size for _, size in job.config.sources) if job.config is not None else 0
        count = plan_workers(requested=options.local_workers, input_bytes=input_bytes, num_units=job.num_units,
                             cores=machine_cores())
        if count > 1:
            log.info("direct runner: %d worker processes (--local-workers to choose)", count)
        run_on(job, pool.local_pool(count) if count > 1 else contextlib.nullcontext(), count)
        return True


def plan_workers(*, requested: int | None, input_bytes: int, num_units: int | None, cores: int) -> int:
    """Pool processes for the direct runner: ``requested`` if given, else one per core for
    inputs worth it (at most one per work unit; None: units planned on the pool, not known yet), else 1 (no pool)."""
    if requested is not None:
        if requested < 1:
            raise UsageError(f"--local-workers {requested}: expected 1 or more (e.g. --local-workers {cores})")
        return requested
    if input_bytes < TINY_BYTES or (num_units is not None and num_units <= 1):
        return 1
    return max(1, min(cores, num_units if num_units is not None else cores))
