"""A ``--runner dask`` run's workers: the steps on a Dask cluster's workers (``pool``), and the
local cluster of a run without ``--dask-address`` (``ahead``), started before Beam's import.

Where the spill stays in place (a cluster of this machine: ``pipelines.local.beam_in_process``)
the launcher runs Beam's graph in process, as the direct runner does, and the cluster's workers
are its pool (``graph.pool.executor_pool`` over ``Client.get_executor``): they run CountRanges,
Parse, Assign and WriteShards, started as soon as the cluster is up, while the launcher imports
Beam and builds the graph (``graph.prefetch``), and never import Beam. Beam's graph on the
cluster (``pipelines.dask_runner``) cost a fresh start of every step's work on the workers once
the graph existed, its translation, and Beam in every worker.

A ``LocalCluster`` worker was a fresh interpreter that imported distributed and the steps (and
Beam, for its graph) again in every worker. Its workers now come from a fork server
(``start_fork_server``: the command starts it once its inputs are listed) that imports them once
while the launcher plans the run; each worker is forked from it with all that imported. ``ahead``
starts the cluster as soon as the run is planned, from a thread of the launcher. Nothing here
imports Beam.
"""
from __future__ import annotations

import contextlib
import functools
import ipaddress
import logging
import os
import signal
import threading
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from shardprep.config import ReshardConfig
from shardprep.formats import WorkUnit

__all__ = ["GRAPH_PRELOAD", "PRELOAD", "QUIET", "ahead", "on_this_machine", "pool", "start_fork_server"]

log = logging.getLogger("shardprep")

# What a worker imports before it joins: the steps' work; for Beam's graph on the cluster
# (``pipelines.local.beam_in_process``: not), also Beam without its connectors and its Dask runner
PRELOAD = ["pipelines.dask_worker"]
GRAPH_PRELOAD = [*PRELOAD, "pipelines.dask_graph_worker"]

STOP_WAIT_S = 10.0  # the most the command waits for the fork server to end (``_stop_fork_server``)

# distributed's periodic housekeeping, slowed down: an idle 2-worker LocalCluster used 2.4 CPU s in
# 20 s without the profiler but otherwise default (mostly the 20 ms event-loop tick of every server),
# 0.7 with these.
# Also for `dask worker` / `dask scheduler` of a real cluster (README, "Sizing a Dask cluster").
QUIET = {
    "distributed.admin.tick.interval": "1s",
    "distributed.admin.system-monitor.interval": "2s",
    "distributed.worker.memory.monitor-interval": "1s",
    "distributed.worker.profile.enabled": False,  # samples every worker thread's stack every 10 ms
    "distributed.scheduler.active-memory-manager.start": False,
}


def start_fork_server(*, graph: bool) -> None:
    """Starts this process's fork server (once), which imports distributed and ``PRELOAD`` (with
    ``graph``: ``GRAPH_PRELOAD``) now, in the background: the local cluster's workers are forked from
    it (``ahead``) with all that imported, instead of each importing it in a fresh interpreter."""
    import multiprocessing
    from multiprocessing import forkserver

    multiprocessing.get_context("forkserver").set_forkserver_preload(["distributed", *(GRAPH_PRELOAD if graph else PRELOAD)])
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
def ahead(workers: int, *, graph: bool) -> Iterator[Callable[[], str]]:
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
                preload=GRAPH_PRELOAD if graph else PRELOAD, silence_logs=quiet)
        except BaseException as e:  # noqa: BLE001 - handed to the caller, in its thread
            started["error"] = e

    log.info("starting a Dask LocalCluster with %d worker processes", workers)
    thread = threading.Thread(target=start, name="shardprep-dask-cluster", daemon=True)
    start_fork_server(graph=graph)  # if the command has not (a test, a caller of its own)
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
def pool(config: ReshardConfig, units: Sequence[WorkUnit], *, address: str | None, workers: int) -> Iterator[str]:
    """The run's steps on the workers of a Dask cluster of this machine (``graph.pool.executor_pool``):
    the cluster at ``address``, or a ``LocalCluster`` of ``workers`` started now (``ahead``); its
    client is made in the background, and the prefetch (``graph.work.ahead``) starts as soon as it is
    up, while this process imports Beam (one core left to it). Yields the pool's token; the client
    (and a cluster started here) is closed when the block ends."""
    from shardprep.graph.pool import IDLE_WAIT_S, executor_pool, remote_idle
    from shardprep.graph.work import ahead as chain

    clients: list[Any] = []

    def start(scheduler: Callable[[], str]) -> tuple[Any, int]:
        import distributed

        client = distributed.Client(scheduler(), set_as_default=False)
        clients.append(client)
        count = len(client.scheduler_info()["workers"])
        if not count:
            log.info("Dask scheduler %s has no workers yet: waiting for one", client.scheduler.address)
            client.wait_for_workers(1)
            count = len(client.scheduler_info()["workers"])
        return client.get_executor(pure=False), count

    def drain() -> None:  # the pool stopped: its tasks cancelled, and those a worker began waited for
        for client in clients:
            if not all(client.run(remote_idle, on_error="ignore").values()):
                log.warning("a Dask worker still runs a task of run %s after %.0f s: it may leave files in %s",
                            config.run_id, IDLE_WAIT_S, config.output)

    with contextlib.ExitStack() as stack:
        scheduler = stack.enter_context(ahead(workers, graph=False)) if address is None else (lambda: address)
        stack.callback(lambda: [client.close() for client in clients])  # before the cluster goes
        yield stack.enter_context(executor_pool(functools.partial(start, scheduler), chain(config), list(units),
                                                spare=1, drain=drain))


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
