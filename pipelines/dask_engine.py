"""The Dask engine (``--runner dask``): the job's heavy stages as tasks on a Dask cluster's workers,
the rest in the launcher (``pipelines.driver``). The cluster is the one at ``--dask-address``, or
a ``LocalCluster`` of ``--dask-workers`` processes started for the run (``ahead``), whose workers
are forked from the launcher on Linux; its workers are the run's pool (``pipelines.pool.executor_pool``
over ``Client.get_executor``). Dask's public API only; neither the launcher nor a worker imports
Beam. What the launcher holds between stages: docs/design.md, "Runners and storage".
"""
from __future__ import annotations

import contextlib
import ipaddress
import logging
import signal
import sys
import urllib.parse
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pipelines import pool
from pipelines.driver import run_on
from pipelines.engines import RunOptions
from shardprep import run_checks
from shardprep.capacity import machine_cores
from shardprep.config import ReshardConfig
from shardprep.job import Job

__all__ = ["PRELOAD", "QUIET", "DaskEngine", "ahead", "on_this_machine", "workers"]

log = logging.getLogger("shardprep")

PRELOAD = ["pipelines.dask_worker"]  # what a worker imports before it joins: the stages' work
_LAUNCHER_SIGNALS = {signal.SIGINT, signal.SIGTERM}  # the launcher's to answer (``ahead``)


class DaskEngine:
    """``--runner dask`` (``pipelines.engines.Engine``)."""

    def checked(self, options: RunOptions) -> RunOptions:
        run_checks.refuse_unknown_args(options.beam_args, beam=False)
        return options._replace(beam_args=())

    def on_this_machine(self, options: RunOptions) -> bool:
        return options.dask_address is None or on_this_machine(options.dask_address)

    def runs(self, options: RunOptions) -> bool:
        return True

    def run(self, job: Job, options: RunOptions) -> bool:
        count = options.dask_workers or machine_cores()
        run_on(job, workers(job.config, address=options.dask_address, workers=count), 0 if options.dask_address else count)
        return True


# distributed's periodic housekeeping, slowed down (an idle cluster's CPU: benchmarks/analysis.md,
# "One job, three engines"); also for `dask worker` / `dask scheduler` of a real cluster (docs/scale-out.md, "Sizing a Dask cluster").
QUIET = {
    "distributed.admin.tick.interval": "1s",
    "distributed.admin.system-monitor.interval": "2s",
    "distributed.worker.memory.monitor-interval": "1s",
    "distributed.worker.profile.enabled": False,  # samples every worker thread's stack every 10 ms
    "distributed.scheduler.active-memory-manager.start": False,
}


@contextlib.contextmanager
def ahead(workers: int) -> Iterator[Callable[[], str]]:
    """Starts a ``LocalCluster`` of ``workers`` single-threaded worker processes on loopback now,
    in a thread, with ``QUIET`` housekeeping (the scheduler and the nannies run in this process);
    yields a function that waits until it is up and gives its scheduler address (or raises why it
    could not start). The cluster is closed when the block ends, however it ends. Its threads, and
    the workers forked from them, start with SIGINT and SIGTERM blocked: the launcher answers them
    (``pipelines.dask_worker.dask_setup``; docs/design.md, "Runners and storage")."""
    import dask
    import distributed  # here, before the thread: one import of it at a time

    # the workers print to this terminal: a failed task's "Compute Failed" and its traceback only
    # with --verbose (the command prints the error once, as one line)
    quiet = logging.WARNING if log.isEnabledFor(logging.DEBUG) else logging.CRITICAL

    def start() -> Any:
        signal.pthread_sigmask(signal.SIG_BLOCK, _LAUNCHER_SIGNALS)  # this thread's, inherited by the cluster's
        cluster = distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                           dashboard_address="127.0.0.1:0", preload=PRELOAD, silence_logs=quiet)
        log.info("Dask scheduler %s, dashboard %s", cluster.scheduler_address, cluster.dashboard_link)
        return cluster

    log.info("starting a Dask LocalCluster with %d worker processes", workers)
    method = "fork" if sys.platform == "linux" else "spawn"  # fork is unsafe with threads on macOS
    with dask.config.set({**QUIET, "distributed.worker.multiprocessing-method": method}), \
            ThreadPoolExecutor(1, thread_name_prefix="shardprep-dask-cluster") as thread:
        cluster = thread.submit(start)  # its error, if it could not start, raised by ``result``
        try:
            yield lambda: cluster.result().scheduler_address
        finally:
            if cluster.exception() is None:  # once it is up
                cluster.result().close()


@contextlib.contextmanager
def workers(config: ReshardConfig, *, address: str | None, workers: int) -> Iterator[pool.Workers]:
    """The workers of the Dask cluster at ``address``, or of a ``LocalCluster`` of ``workers``
    processes started now (``ahead``), as the run's pool; the client (and a cluster started here)
    is closed when the block ends, once no worker runs a task of the run any more."""
    import distributed

    with contextlib.ExitStack() as stack:
        scheduler = stack.enter_context(ahead(workers)) if address is None else (lambda: address)
        client = distributed.Client(scheduler(), set_as_default=False)
        stack.callback(client.close)  # before the cluster goes
        if not client.scheduler_info()["workers"]:
            log.info("Dask scheduler %s has no workers yet: waiting for one", client.scheduler.address)
            client.wait_for_workers(1)
        count = len(client.scheduler_info()["workers"])

        def drain() -> None:  # the pool stopped: its tasks cancelled, and those a worker began waited for
            if not all(client.run(pool.remote_idle, on_error="ignore").values()):
                log.warning("a Dask worker still runs a task of run %s after %.0f s: it may leave files in %s",
                            config.run_id, pool.IDLE_WAIT_S, config.output)

        yield stack.enter_context(pool.executor_pool(client.get_executor(pure=False), count, drain))


def on_this_machine(address: str) -> bool:
    """Whether a scheduler at ``address`` (``tcp://host:port`` or ``host:port``) listens on loopback:
    then its workers run on this machine too (one of another machine could reach it only through a
    tunnel, and would still read the same files, only slower)."""
    host = urllib.parse.urlsplit(address if "://" in address else f"tcp://{address}").hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name
        return False
