"""A Dask cluster's workers for the Dask engine (``pipelines.dask_engine``): the cluster at
``--dask-address``, or a ``LocalCluster`` started for the run (``ahead``), as a pool of the
job's heavy stages (``graph.pool.executor_pool`` over ``Client.get_executor``).

A ``LocalCluster`` worker was a fresh interpreter that imported distributed and the steps again in
every worker. Its workers now come from a fork server (``start_fork_server``: the command starts it
once its inputs are listed) that imports them once while the launcher plans the run; each worker is
forked from it with all that imported. Nothing here imports Beam, and no worker does.
"""
from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import signal
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any

from shardprep.config import ReshardConfig
from shardprep.graph import pool

__all__ = ["PRELOAD", "QUIET", "ahead", "on_this_machine", "start_fork_server", "workers"]

log = logging.getLogger("shardprep")

PRELOAD = ["pipelines.dask_worker"]  # what a worker imports before it joins: the stages' work

STOP_WAIT_S = 10.0  # the most the command waits for the fork server to end (``_stop_fork_server``)

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


def start_fork_server() -> None:
    """Starts this process's fork server (once), which imports distributed and ``PRELOAD`` now, in
    the background: the local cluster's workers are forked from it (``ahead``) with all that
    imported, instead of each importing it in a fresh interpreter."""
    import multiprocessing
    from multiprocessing import forkserver

    multiprocessing.get_context("forkserver").set_forkserver_preload(["distributed", *PRELOAD])
    if threading.current_thread() is not threading.main_thread():  # signals are the main thread's to set
        forkserver.ensure_running()
        return
    # The server starts with SIGINT ignored (a disposition a new program inherits, and Python keeps)
    # and so do the workers forked from it: Ctrl-C in a terminal reaches the whole process group,
    # and the launcher answers it in one line (it stops the cluster, its workers with it); the
    # server printed a KeyboardInterrupt traceback from the middle of its imports, a worker from its
    # event loop. Blocked meanwhile, a Ctrl-C of these few milliseconds reaches this thread after.
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGINT])
    handler = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        forkserver.ensure_running()
    finally:
        signal.signal(signal.SIGINT, handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


@contextlib.contextmanager
def ahead(workers: int) -> Iterator[Callable[[], str]]:
    """Starts a ``LocalCluster`` of ``workers`` single-threaded worker processes on loopback now,
    in a thread, forked from the fork server, with ``QUIET`` housekeeping (the scheduler and the
    nannies run in this process);
    yields a function that waits until it is up and gives its scheduler address (or raises why it
    could not start). The cluster is closed when the block ends, however it ends."""
    import dask
    import distributed  # here, before the thread: one import of it at a time

    started: dict[str, Any] = {}
    # the workers print to this terminal: a failed task's "Compute Failed" and its traceback only
    # with --verbose (the command prints the error once, as one line)
    quiet = logging.WARNING if log.isEnabledFor(logging.DEBUG) else logging.CRITICAL

    def start() -> None:
        try:
            started["cluster"] = distributed.LocalCluster(
                n_workers=workers, threads_per_worker=1, processes=True, dashboard_address="127.0.0.1:0",
                preload=PRELOAD, silence_logs=quiet)
        except BaseException as e:  # noqa: BLE001 - handed to the caller, in its thread
            started["error"] = e

    log.info("starting a Dask LocalCluster with %d worker processes", workers)
    thread = threading.Thread(target=start, name="shardprep-dask-cluster", daemon=True)
    start_fork_server()  # if the command has not (a test, a caller of its own)
    with dask.config.set({**QUIET, "distributed.worker.multiprocessing-method": "forkserver"}):
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
            try:
                if "cluster" in started:
                    started["cluster"].close()
            finally:
                _stop_fork_server()


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


def _stop_fork_server() -> None:
    """Ends the fork server and reaps it, once the cluster is closed (the server has reaped its
    workers by then: a Nanny waits for its worker's exit status, which the server sends): no process
    outlives the command, and the workers' CPU time counts as the command's (``wait4``, ``time``).

    It is killed, not asked to stop: with nothing left to do, its own exit (the finalisation of an
    interpreter holding distributed and the steps) added ~0.1 s to every run; and asked to stop it
    ends only once every process it forked has (each holds the end of the pipe it watches), so a
    worker that a cluster cut short left running held the command. Such a worker ends with its
    Nanny's pipe. The wait is bounded all the same.
    """
    from multiprocessing import forkserver

    server = forkserver._forkserver  # CPython's own attributes (its tests use them); 3.9 to 3.13 at least
    pid, stop = getattr(server, "_forkserver_pid", None), getattr(server, "_stop", None)
    if pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    if stop is not None:
        stopping = threading.Thread(target=stop, name="shardprep-fork-server-stop", daemon=True)
        stopping.start()
        stopping.join(STOP_WAIT_S)


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
