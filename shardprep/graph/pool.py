"""Worker processes for the job's heavy stages, and what a worker runs for a task of one.

``local_pool`` forks this machine's processes, ``executor_pool`` takes a Dask cluster's
``Client.get_executor``; either gives a ``Workers``, to which ``pipelines.driver`` hands a stage's
elements a few at a time. A task is ``(work key, pickled work, elements, side inputs)``; its worker
keeps the work set up between tasks of one stage (``run_task``) and sends back its outputs, what
its ``Counter`` s counted and its log records. Elements are small (units, references to spilled
batches): the records travel through the spill files. A dead process fails the run (``PoolDied``);
fork safety, cancelled Dask tasks and the rest: docs/design.md, "Runners and storage".
"""
from __future__ import annotations

import collections
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
from typing import Any, NamedTuple

from shardprep import background, lease, malloc
from shardprep.graph.elements import Tagged

__all__ = ["IDLE_WAIT_S", "SWITCH_INTERVAL_S", "Counter", "PoolDied", "TASKS_PER_PROCESS", "Workers", "blob_of", "executor_pool", "helper", "in_worker", "local_pool",
           "remote_idle", "remote_task", "run_inline", "run_task", "split_output", "tasks_of"]

NAMESPACE = "shardprep"
PRELOAD = ["shardprep.job"]  # the stages' work, imported before the processes start
TASKS_PER_PROCESS = 8  # a stage's elements are cut into at least this many tasks per process: balance vs overhead
_PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when its parent dies
IDLE_WAIT_S = 60.0  # the most ``remote_idle`` waits for a worker's task of a stopped pool to end
# A pool process's threads (the shard writer, the statistics' counter) take the GIL back after each
# system call; at Python's default 5 ms a writer done with a pwrite waits that long for the thread
# gathering the next shard
SWITCH_INTERVAL_S = 0.0005
Work = Any  # a stage's work: process(element, *side) -> outputs; optional setup(), flush() -> outputs, teardown()
TaskResult = tuple[list, dict[str, int], list[logging.LogRecord]]  # outputs (tag, value), counters, log records


class _Process:
    """What this process keeps for the tasks it runs (one instance, ``_here``)."""

    def __init__(self) -> None:
        self.tally: collections.Counter | None = None  # during a task or a stage run in line: what Counters counted
        self.work: tuple[bytes, Work] = (b"", None)  # in a worker: (key, work) of the stage it runs, set up once
        self.records: list[logging.LogRecord] = []  # in a worker, during a task: its log records, for the launcher
        self.one_at_a_time = threading.Lock()  # in another engine's worker: its tasks of a pool run one at a time
        self.joined_level: int | None = None  # in another engine's worker: the log level it collects at, once set
        self.worker = False  # a process of the local pool (``in_worker``)


_here = _Process()

log = logging.getLogger("shardprep")


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


class Counter:
    """A counter of this product's namespace: tallied for the launcher in a task or a stage run in
    line (``run_task``, ``run_inline``), a Beam counter in a Beam worker."""

    def __init__(self, name: str) -> None:
        self._name = name

    def inc(self, n: int = 1) -> None:
        if _here.tally is not None:
            _here.tally[self._name] += n
            return
        from apache_beam.metrics import Metrics  # a Beam worker (``pipelines.beam_graph``): Beam is imported there

        Metrics.counter(NAMESPACE, self._name).inc(n)


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


def split_output(out: Any) -> tuple[str | None, Any]:
    """(tag, value) of a work's output: ``Tagged`` for a side output, else (None, out)."""
    if isinstance(out, Tagged):
        return out.tag, out.value
    return None, out


class _Collect(logging.Handler):
    """In a worker: keeps this product's log records, as text, for the launcher."""

    def emit(self, record: logging.LogRecord) -> None:
        record.msg, record.args = record.getMessage(), None
        if record.exc_info:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
            record.exc_info = None
        _here.records.append(record)


def _collect_logs(level: int) -> None:
    malloc.keep_freed_memory()  # the steps free large buffers: let malloc keep them (``shardprep.malloc``)
    logger = logging.getLogger("shardprep")
    logger.handlers[:] = [_Collect()]
    logger.setLevel(level)
    logger.propagate = False


def _start_process(level: int, launcher: int) -> None:
    """In each pool process: leave SIGINT to the launcher, die on SIGTERM (not of the launcher's
    handlers, which came with the fork) and on Linux with the launcher; hand the GIL over sooner
    (``SWITCH_INTERVAL_S``); count statistics in line (``in_worker``); collect log records."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    _here.worker = True
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != launcher:  # it died before the prctl
            os._exit(1)
    _collect_logs(level)


def remote_task(level: int, task: tuple[bytes, bytes, list, tuple]) -> TaskResult:
    """``run_task`` in another engine's worker (``executor_pool``), one task at a time in the process
    (the counters, log records and set-up copies are the process's; a worker of several threads
    runs them in turn); its log records go back to the launcher at the launcher's ``level``."""
    with _here.one_at_a_time:
        if _here.joined_level != level:
            _collect_logs(level)
            _here.joined_level = level
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
        if _here.one_at_a_time.locked():
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= settle_s:
            return True
        await asyncio.sleep(0.02)
    return False


def run_task(task: tuple[bytes, bytes, list, tuple]) -> TaskResult:
    """In a worker: the outputs of ``elements`` (tag, value), what the work counted, its log
    records; the work flushed (what it left to finish in the background is done) before they go back."""
    key, blob, elements, side = task
    if _here.work[0] != key:  # the first task of a stage here: the last stage's work torn down
        getattr(_here.work[1], "teardown", lambda: None)()
        _here.work = key, pickle.loads(blob)
        getattr(_here.work[1], "setup", lambda: None)()
    work = _here.work[1]
    lease.pause("pool.task")  # test hook (race and interrupt tests)
    try:
        outputs, counted = _tallied(work, elements, side)
        return outputs, counted, list(_here.records)
    finally:
        _here.records.clear()


def in_worker() -> bool:
    """Whether this is a process of the local pool: one process per core, so a helper thread there
    would only take a core from another worker's steps. (Another engine's worker may run our tasks
    one at a time with cores to spare: not counted as one.)"""
    return _here.worker


def helper(name: str) -> background.Behind:
    """Work beside a step's (``background.Behind``): on a thread of its own where a core is free
    (one process: its compiled parts free the GIL), in line in a local pool's process (``in_worker``)."""
    return background.Behind(name, inline=in_worker())


def run_inline(work: Work, elements: list, side: tuple) -> tuple[list, dict[str, int]]:
    """A stage's work over ``elements`` in this process: its outputs (tag, value) and what it counted."""
    getattr(work, "setup", lambda: None)()
    try:
        return _tallied(work, elements, side)
    finally:
        getattr(work, "teardown", lambda: None)()


def _tallied(work: Work, elements: list, side: tuple) -> tuple[list, dict[str, int]]:
    _here.tally = collections.Counter()
    try:
        outputs = [split_output(out) for element in elements for out in work.process(element, *side) or ()]
        outputs += [split_output(out) for out in getattr(work, "flush", lambda: None)() or ()]
        return outputs, dict(_here.tally)
    finally:
        _here.tally = None
