"""Worker processes for the job's heavy stages: this machine's, or a Dask cluster's.

``local_pool`` forks this machine's processes, ``executor_pool`` takes a Dask cluster's
``Client.get_executor``; either gives a ``Workers``, to which ``pipelines.driver`` hands a stage's
elements a few at a time (``tasks_of``). What a worker runs for a task is ``graph.tasks.run_task``
(the stages' work, shared by the engines); it sends back the task's outputs, counts and log
records. Elements are small (units, references to spilled batches): the records travel through the
spill files. A dead process fails the run (``PoolDied``); fork safety, cancelled Dask tasks and the
rest: docs/design.md, "Runners and storage". Nothing here imports Beam.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import importlib
import logging
import multiprocessing
import os
import pickle
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, ProcessPoolExecutor
from typing import NamedTuple

from shardprep import malloc
from shardprep.graph.tasks import TaskResult, Work, collect_logs, mark_pool_process, run_task

__all__ = ["IDLE_WAIT_S", "PRELOAD", "SWITCH_INTERVAL_S", "TASKS_PER_PROCESS", "PoolDied", "Workers", "blob_of",
           "executor_pool", "local_pool", "remote_idle", "remote_task", "tasks_of"]

PRELOAD = ["shardprep.job"]  # the stages' work, imported before the processes start
TASKS_PER_PROCESS = 8  # a stage's elements are cut into at least this many tasks per process: balance vs overhead
_PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when its parent dies
IDLE_WAIT_S = 60.0  # the most ``remote_idle`` waits for a worker's task of a stopped pool to end
# A pool process's threads (the shard writer, the statistics' counter) take the GIL back after each
# system call; at Python's default 5 ms a writer done with a pwrite waits that long for the thread
# gathering the next shard
SWITCH_INTERVAL_S = 0.0005

log = logging.getLogger("shardprep")


class _Remote:
    """In another engine's worker (``remote_task``): its tasks of a pool run one at a time."""

    one_at_a_time = threading.Lock()
    joined_level: int | None = None  # the log level it collects at, once set


class PoolDied(RuntimeError):
    """A pool process ended in the middle of the run (killed, e.g. by the kernel's OOM killer)."""

    def __init__(self) -> None:
        super().__init__("a worker process of the local pool died (killed: out of memory? see `dmesg`); rerun "
                         "with fewer --local-workers or a smaller --unit-mb")


class Workers(NamedTuple):
    """Started worker processes: the executor, the tasks it runs at once, what a worker runs for a task."""

    executor: Executor
    processes: int
    task: Callable[[tuple[bytes, bytes, list, tuple]], TaskResult]


def blob_of(work: Work) -> tuple[bytes, bytes]:
    """``work`` pickled, and the key a worker caches its set-up copy by."""
    blob = pickle.dumps(work, protocol=pickle.HIGHEST_PROTOCOL)
    return hashlib.sha256(blob).digest(), blob


def tasks_of(elements: list, processes: int, per_process: int = TASKS_PER_PROCESS) -> list[list]:
    """A stage's elements cut into tasks for ``processes`` workers, in order: one element each, or at least
    ``per_process`` per process (under twice that), so that a stage's tail is one element's work."""
    size = max(1, len(elements) // (processes * per_process))
    return [elements[lo:lo + size] for lo in range(0, len(elements), size)]


@contextlib.contextmanager
def local_pool(processes: int) -> Iterator[Workers]:
    """Forks ``processes`` pool processes for one run. They ignore SIGINT (the launcher handles
    it), send their log records back with their results, and are terminated when the block ends,
    however it ends (none of them writes for the run after that)."""
    if sys.platform == "linux":
        ctx = multiprocessing.get_context("fork")
        for name in PRELOAD:  # once here, not in every process
            importlib.import_module(name)
    else:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(PRELOAD)
    others = set(multiprocessing.active_children())
    executor = ProcessPoolExecutor(processes, mp_context=ctx, initializer=_start_process,
                                   initargs=(log.getEffectiveLevel(), os.getpid()))
    malloc.freeze_for_fork(lambda: executor.submit(os.getpid))  # forks every process now, from this thread
    try:
        yield Workers(executor, processes, run_task)
    finally:
        alive = [p for p in multiprocessing.active_children() if p not in others]  # the executor's
        for process in alive:
            process.terminate()
        for process in alive:
            process.join()
        executor.shutdown(wait=True)  # its thread fails the tasks left (BrokenProcessPool)


@contextlib.contextmanager
def executor_pool(executor: Executor, processes: int, drain: Callable[[], None]) -> Iterator[Workers]:
    """Another engine's worker processes (they import this module) as a pool. When the block ends
    the tasks not yet started are cancelled; when it ends by an exception, ``drain`` returns once no
    worker runs one any more (``remote_idle`` on each). A block that ends normally has read every
    task's result: no task runs then."""
    try:
        yield Workers(executor, processes, functools.partial(remote_task, log.getEffectiveLevel()))
    except BaseException:
        executor.shutdown(wait=False)  # Dask's ClientExecutor: cancels the futures not yet done
        drain()
        raise
    executor.shutdown(wait=False)


def _start_process(level: int, launcher: int) -> None:
    """In each pool process: leave SIGINT to the launcher, die on SIGTERM (not of the launcher's
    handlers, which came with the fork) and on Linux with the launcher; hand the GIL over sooner
    (``SWITCH_INTERVAL_S``); count statistics in line (``graph.tasks.in_worker``); collect log records."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    mark_pool_process()
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != launcher:  # it died before the prctl
            os._exit(1)
    collect_logs(level)


def remote_task(level: int, task: tuple[bytes, bytes, list, tuple]) -> TaskResult:
    """``run_task`` in another engine's worker (``executor_pool``), one task at a time in the process
    (the counters, log records and set-up copies are the process's; a worker of several threads
    runs them in turn); its log records go back to the launcher at the launcher's ``level``."""
    with _Remote.one_at_a_time:
        if _Remote.joined_level != level:
            collect_logs(level)
            _Remote.joined_level = level
        return run_task(task)


async def remote_idle(settle_s: float = 0.1) -> bool:
    """In another engine's worker, on its event loop (Dask's ``Client.run``), once the launcher has
    cancelled a pool's tasks: returns once no task of a pool has run in this process for
    ``settle_s`` (a task queued before the cancel arrived may still start), or after
    ``IDLE_WAIT_S``; whether it is idle. A task begun runs on after its future is cancelled (a
    thread cannot be stopped), and would write into a run folder being removed."""
    import asyncio  # here: a local run never needs it (its import slows every launcher's start)

    deadline, quiet_since = time.monotonic() + IDLE_WAIT_S, time.monotonic()
    while time.monotonic() < deadline:
        if _Remote.one_at_a_time.locked():
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= settle_s:
            return True
        await asyncio.sleep(0.02)
    return False
