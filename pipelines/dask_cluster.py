"""A Dask cluster's workers for the Dask engine (``pipelines.dask_engine``): the cluster at
``--dask-address``, or a ``LocalCluster`` started for the run (``ahead``), as a pool of the
job's heavy stages (``graph.pool.executor_pool`` over ``Client.get_executor``).

On Linux a run's own cluster forks its workers from the launcher (Dask's ``fork``
multiprocessing method), which has imported distributed and the steps already: no interpreter
starts and nothing is imported twice. Nothing here imports Beam, and no worker does.
"""
from __future__ import annotations

import contextlib
import ipaddress
import logging
import signal
import sys
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any

from shardprep.config import ReshardConfig
from shardprep.graph import pool

__all__ = ["PRELOAD", "QUIET", "ahead", "on_this_machine", "workers"]

log = logging.getLogger("shardprep")

PRELOAD = ["pipelines.dask_worker"]  # what a worker imports before it joins: the stages' work
_LAUNCHER_SIGNALS = {signal.SIGINT, signal.SIGTERM}  # the launcher's to answer (``ahead``)

# distributed's periodic housekeeping, slowed down: an idle 2-worker LocalCluster used 2.4 CPU s in
# 20 s without the profiler but otherwise default (mostly the 20 ms event-loop tick of every server),
# 0.7 with these.
# Also for `dask worker` / `dask scheduler` of a real cluster (docs/scale-out.md, "Sizing a Dask cluster").
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
    could not start). The cluster is closed when the block ends, however it ends.

    The cluster's threads, and the workers forked from them, start with SIGINT and SIGTERM
    blocked: the launcher's main thread answers them (Ctrl-C reaches the whole process group, and
    the launcher stops the cluster, its workers with it); a worker then ignores SIGINT and dies of
    SIGTERM (``pipelines.dask_worker.dask_setup``), not of the launcher's handlers it was forked with."""
    import dask
    import distributed  # here, before the thread: one import of it at a time

    started: dict[str, Any] = {}
    # the workers print to this terminal: a failed task's "Compute Failed" and its traceback only
    # with --verbose (the command prints the error once, as one line)
    quiet = logging.WARNING if log.isEnabledFor(logging.DEBUG) else logging.CRITICAL

    def start() -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, _LAUNCHER_SIGNALS)  # this thread's, inherited by the cluster's
        try:
            started["cluster"] = distributed.LocalCluster(
                n_workers=workers, threads_per_worker=1, processes=True, dashboard_address="127.0.0.1:0",
                preload=PRELOAD, silence_logs=quiet)
        except BaseException as e:  # noqa: BLE001 - handed to the caller, in its thread
            started["error"] = e

    log.info("starting a Dask LocalCluster with %d worker processes", workers)
    thread = threading.Thread(target=start, name="shardprep-dask-cluster", daemon=True)
    method = "fork" if sys.platform == "linux" else "spawn"  # fork is unsafe with threads on macOS
    with dask.config.set({**QUIET, "distributed.worker.multiprocessing-method": method}):
        thread.start()

        def address() -> str:
            thread.join()
            if "error" in started:
                raise started["error"]
            cluster = started["cluster"]
            if not started.get("logged"):
                started["logged"] = True
                log.info("Dask scheduler %s, dashboard %s", cluster.scheduler_address, cluster.dashboard_link)
            return cluster.scheduler_address

        try:
            yield address
        finally:
            thread.join()
            if "cluster" in started:
                started["cluster"].close()


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
        count = len(client.scheduler_info()["workers"])
        if not count:
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
