"""Every core of one machine for the steps that do the work, beside Beam's in-process DirectRunner.

Beam's multi-processing DirectRunner starts each SDK worker as a fresh interpreter (~3.5 CPU s of
imports each on a small machine) and sends every element through gRPC; on a few cores that
start-up costs as much as it saves below a few hundred MB. Here the run stays in the in-process
DirectRunner, and the steps that do the work (CountRanges, Parse, Assign, WriteShards) hand their
bundles, a few elements at a time, to processes forked from the launcher (``local_pool``;
``graph.dofns.Pooled`` is Beam's side). Results come back in element order, and every element is
processed by the same code as in line, so the output does not depend on the number of processes.
Elements are small (work units, references to spilled batches): the record bytes travel through
the spill files, not the pool.

A step's work is plain Python, not a Beam DoFn: an object with ``process(element, *side)`` giving
its outputs (a ``graph.elements.Tagged`` for a side output) and optional ``setup`` / ``teardown``.
None of the modules that hold it imports Beam, so the pool forks before the launcher imports Beam
and its processes never do (``tests/test_pool.py`` checks): they start in ~0.1 CPU s each, and
the first steps run while the launcher imports Beam and builds the graph (``prefetch``).

**Prefetch** (``graph.prefetch``): ``local_pool(prefetch=...)`` starts a chain of steps on the
pool at once, and ``take`` hands their results to Beam's steps that run the same work.

**Another engine's workers** (``executor_pool``): the same steps, prefetch and ``Pooled`` run on
any ``concurrent.futures.Executor`` whose processes import this module, e.g. a Dask cluster's
(``pipelines.dask_cluster``: ``Client.get_executor``), started in the background while the launcher
imports Beam; such a process runs one task at a time (``remote_task``), whatever its threads. A
task it has begun runs on when its future is cancelled, so a stopped pool waits for it
(``remote_idle``) before the run's files are removed.

The pool is a ``ProcessPoolExecutor``: if one of its processes dies (the OOM killer), every task
not yet answered fails (``BrokenProcessPool``; ``Pooled`` turns it into ``PoolDied``) and so does
the run, where ``multiprocessing.Pool`` would replace the process, lose its task and wait forever.

The fork happens when the launcher's only other thread is the lease renewer (``shardprep.lease``),
which holds no lock a pool process takes; fsspec and logging reset their own locks in a forked
child. Where fork is not the platform's safe default (not Linux) the processes come from a fork
server instead. Beam's metrics do not reach a pool process: the steps count with ``Counter``,
which a pool process tallies and ``Pooled`` adds to the step's Beam counters.
"""
from __future__ import annotations

import asyncio
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
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from typing import Any, NamedTuple

from shardprep import lease, malloc
from shardprep.graph.elements import Tagged
from shardprep.graph.prefetch import Ahead, Prefetch

__all__ = ["IDLE_WAIT_S", "Counter", "PoolDied", "Running", "Work", "blob_of", "executor_pool", "local_pool", "pool_of",
           "remote_each", "remote_idle", "remote_task", "run_each", "run_task", "split_output", "stop", "take"]

NAMESPACE = "shardprep"
PRELOAD = ["shardprep.graph.parse", "shardprep.graph.stages"]  # the steps' work, imported before the processes start
_PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when its parent dies
IDLE_WAIT_S = 60.0  # the most ``remote_idle`` waits for a worker's task of a stopped pool to end
Work = Any  # a step's work: process(element, *side) -> outputs; optional setup() and teardown()
TaskResult = tuple[list, dict[str, int], list[logging.LogRecord]]  # outputs (tag, value), counters, log records
_POOLS: dict[str, Future] = {}  # in the launcher: the pools (each a future of its ``Running``), by token
_STARTING = threading.Lock()  # a pool registered once started, or dropped if stopped meanwhile
_tally: collections.Counter | None = None  # in a pool process, during a task: what its Counters counted
_works: dict[bytes, Work] = {}  # in a pool process: the work of the step it runs, set up once
_records: list[logging.LogRecord] = []  # in a pool process, during a task: its log records, for the launcher
_one_at_a_time = threading.Lock()  # in another engine's worker: its tasks of this pool run one at a time (``remote_task``)
_joined_level: int | None = None  # in another engine's worker: the log level it collects at, once set (``_join``)

log = logging.getLogger("shardprep")


class PoolDied(RuntimeError):
    """A pool process ended in the middle of the run (killed, e.g. by the kernel's OOM killer)."""

    def __init__(self) -> None:
        super().__init__("a worker process of the local pool died (killed: out of memory? see `dmesg`); rerun "
                         "with fewer --local-workers or a smaller --unit-mb")


def _nothing() -> None:
    pass


class Running(NamedTuple):
    """A started pool (in the launcher): its executor, how many tasks it runs at once, its prefetch,
    what its processes run for a task of ``Pooled`` (``run_task``) and of the prefetch (``run_each``),
    and what waits, once it is stopped, until none of them runs a task any more."""

    executor: Executor
    processes: int
    prefetch: Prefetch
    task: Callable[[tuple[bytes, bytes, list, tuple]], Any]
    drain: Callable[[], None] = _nothing


class Counter:
    """A Beam counter of this product's namespace that also counts in a pool process."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._beam: Any = None

    def __getstate__(self) -> dict:
        return {"_name": self._name, "_beam": None}

    def inc(self, n: int = 1) -> None:
        if _tally is not None:
            _tally[self._name] += n
            return
        if self._beam is None:  # in line, on a Beam worker: Beam is imported there
            from apache_beam.metrics import Metrics

            self._beam = Metrics.counter(NAMESPACE, self._name)
        self._beam.inc(n)


def blob_of(work: Work) -> tuple[bytes, bytes]:
    """``work`` pickled, and the key a pool process caches its set-up copy by."""
    blob = pickle.dumps(work, protocol=pickle.HIGHEST_PROTOCOL)
    return hashlib.sha256(blob).digest(), blob


@contextlib.contextmanager
def local_pool(processes: int, prefetch: Sequence[Ahead] = (), elements: Sequence[Any] = ()) -> Iterator[str]:
    """Starts ``processes`` pool processes for one run; yields the token ``graph.dofns.pooled`` names it by.

    ``prefetch``: a chain of steps to start at once from ``elements`` (``graph.prefetch``). The processes
    ignore SIGINT (the launcher handles it), send their log records back with their results (the
    launcher logs them, in element order), and are terminated when the run ends, however it ends.
    """
    if sys.platform == "linux":
        ctx = multiprocessing.get_context("fork")
        for name in PRELOAD:  # once here, not in every process
            importlib.import_module(name)
    else:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(PRELOAD)
    executor = ProcessPoolExecutor(processes, mp_context=ctx, initializer=_start_process,
                                   initargs=(log.getEffectiveLevel(), os.getpid()))
    executor.submit(os.getpid)  # forks every process now, from this thread (not the prefetch's, later)
    token = uuid.uuid4().hex
    ahead = Prefetch(executor, processes, _chain(prefetch), list(elements), run_each, early=processes - 1)
    _POOLS[token] = started = Future()
    started.set_result(Running(executor, processes, ahead, run_task))
    try:
        yield token
    finally:
        stop(token)


@contextlib.contextmanager
def executor_pool(start: Callable[[], tuple[Executor, int]], prefetch: Sequence[Ahead] = (),
                  elements: Sequence[Any] = (), *, spare: int = 0, drain: Callable[[], None] = _nothing) -> Iterator[str]:
    """A pool on the processes of another engine (``graph.pool``); yields its token at once.

    ``start`` runs in a thread, now: it gives the executor (whose processes import this module)
    and how many processes it has, once they are up (``pool_of`` waits for that, and raises what
    ``start`` raised). The prefetch then begins, at most ``processes - spare`` tasks at a time
    until Beam asks for a step (``spare``: cores the launcher needs meanwhile). The caller owns
    what ``start`` started; when the pool is stopped (``stop``: at the latest when the block ends),
    no more tasks are submitted, those not yet started are cancelled, and ``drain`` returns once
    no process runs one any more (``remote_idle`` on each).
    """
    token = uuid.uuid4().hex
    _POOLS[token] = started = Future()
    task = functools.partial(remote_task, log.getEffectiveLevel())
    each = functools.partial(remote_each, log.getEffectiveLevel())

    def begin() -> None:
        try:
            executor, processes = start()
        except BaseException as e:  # noqa: BLE001 - raised where the pool is asked for (pool_of)
            started.set_exception(e)
            return
        with _STARTING:
            if _POOLS.get(token) is not started:  # stopped while it started
                executor.shutdown(wait=False)
                started.cancel()
                return
            ahead = Prefetch(executor, processes, _chain(prefetch), list(elements), each, early=processes - spare)
            started.set_result(Running(executor, processes, ahead, task, drain))

    thread = threading.Thread(target=begin, name="shardprep-pool-start", daemon=True)
    thread.start()
    try:
        yield token
    finally:
        stop(token)
        thread.join()


def _chain(prefetch: Sequence[Ahead]) -> list[tuple[bytes, bytes, Ahead]]:
    return [(*blob_of(step.work), step) for step in prefetch]


def stop(token: str) -> None:
    """Ends the pool ``token`` now: a local pool's processes terminated; another engine's tasks not
    yet started cancelled, and those begun waited for; nothing if it has ended. None of its
    processes writes for the run after this."""
    with _STARTING:
        started = _POOLS.pop(token, None)
    if started is None or not started.done() or started.cancelled() or started.exception() is not None:
        return
    executor, _, ahead, _, drain = started.result()
    ahead.cancel(wait=False)
    if not isinstance(executor, ProcessPoolExecutor):
        executor.shutdown(wait=False)
        drain()
        return
    processes = list((getattr(executor, "_processes", None) or {}).values())  # no public way before 3.14
    for process in processes:
        process.terminate()
    for process in processes:
        process.join()
    executor.shutdown(wait=True, cancel_futures=True)


def pool_of(token: str) -> Running | None:
    """The pool ``token``, once started, or None (another process: a remote worker)."""
    started = _POOLS.get(token)
    return started.result() if started is not None else None


def take(token: str, key: bytes, elements: list, side: tuple) -> list[tuple[Future, int]] | None:
    """The prefetched results of the work ``key`` for ``elements`` with ``side`` (each: its task,
    and its place in the task's list of ``TaskResult``), or None: then no prefetched task of the
    pool runs any more, and the caller computes them."""
    running = pool_of(token)
    return running.prefetch.take(key, elements, side) if running is not None else None


def split_output(out: Any) -> tuple[str | None, Any]:
    """(tag, value) of a work's output: ``Tagged`` (or Beam's ``TaggedOutput``, from a Beam DoFn), else (None, out)."""
    if isinstance(out, Tagged) or type(out).__name__ == "TaggedOutput":
        return out.tag, out.value
    return None, out


class _Collect(logging.Handler):
    """In a pool process: keeps this product's log records, as text, for the launcher."""

    def emit(self, record: logging.LogRecord) -> None:
        record.msg, record.args = record.getMessage(), None
        if record.exc_info:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
            record.exc_info = None
        _records.append(record)


def _start_process(level: int, launcher: int) -> None:
    """In each pool process: leave SIGINT to the launcher, die on SIGTERM (the launcher's handlers
    came with the fork) and, on Linux, with the launcher (a SIGKILLed or OOM-killed launcher leaves
    no process writing into its run folder); keep log records at the launcher's level; let malloc
    keep what the steps free (``shardprep.malloc``)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != launcher:  # it died before the prctl
            os._exit(1)
    malloc.keep_freed_memory()
    logger = logging.getLogger("shardprep")
    logger.handlers[:] = [_Collect()]
    logger.setLevel(level)
    logger.propagate = False


def _join(level: int) -> None:
    """In another engine's worker, before its first task of a pool: log records go back to the
    launcher at its ``level`` (as a pool process's do), and malloc keeps what the steps free."""
    global _joined_level
    if _joined_level != level:
        malloc.keep_freed_memory()
        logger = logging.getLogger("shardprep")
        logger.handlers[:] = [_Collect()]
        logger.setLevel(level)
        logger.propagate = False
        _joined_level = level


def remote_task(level: int, task: tuple[bytes, bytes, list, tuple]) -> TaskResult:
    """``run_task`` in another engine's worker (``executor_pool``), one task at a time in the process
    (the steps' counters, log records and set-up copies are the process's; a worker of several threads
    runs them in turn)."""
    with _one_at_a_time:
        _join(level)
        return run_task(task)


def remote_each(level: int, task: tuple[bytes, bytes, list, tuple]) -> list[TaskResult]:
    """``run_each`` in another engine's worker (see ``remote_task``)."""
    with _one_at_a_time:
        _join(level)
        return run_each(task)


async def remote_idle(settle_s: float = 0.1) -> bool:
    """In another engine's worker, on its event loop (Dask's ``Client.run``), once the launcher has
    cancelled a pool's tasks: returns once no task of a pool has run in this process for
    ``settle_s`` (a task queued before the cancel arrived may still start), or after
    ``IDLE_WAIT_S``; whether it is idle. A task begun runs on after its future is cancelled (a
    thread cannot be stopped), and would write into a run folder being removed."""
    deadline, quiet_since = time.monotonic() + IDLE_WAIT_S, None
    while time.monotonic() < deadline:
        if _one_at_a_time.locked():
            quiet_since = None
        elif quiet_since is None:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= settle_s:
            return True
        await asyncio.sleep(0.02)
    return False


def run_each(task: tuple[bytes, bytes, list, tuple]) -> list[TaskResult]:
    """In a pool process: ``run_task`` of each element apart (the prefetch hands results out per
    element), the work flushed once all have run."""
    key, blob, elements, side = task
    results = [run_task((key, blob, [element], side), flush=False) for element in elements]
    _flush(_works.get(key))
    return results


def _flush(work: Work | None) -> None:
    """A work's optional ``flush``: what it left to finish in the background is done (``WriteShard``
    stores its last shard), before the task's results go back."""
    getattr(work, "flush", lambda: None)()


def run_task(task: tuple[bytes, bytes, list, tuple], *, flush: bool = True) -> TaskResult:
    """In a pool process: the outputs of ``elements`` (tag, value), what the work counted, its log
    records; with ``flush``, the work flushed before they go back."""
    global _tally
    key, blob, elements, side = task
    work = _works.get(key)
    if work is None:
        for old in _works.values():
            getattr(old, "teardown", lambda: None)()
        _works.clear()
        work = _works[key] = pickle.loads(blob)
        getattr(work, "setup", lambda: None)()
    lease.pause("pool.task")  # test hook (race and interrupt tests)
    _tally = collections.Counter()
    try:
        outputs = [split_output(out) for element in elements for out in work.process(element, *side) or ()]
        if flush:
            _flush(work)
        return outputs, dict(_tally), list(_records)
    finally:
        _tally = None
        _records.clear()
