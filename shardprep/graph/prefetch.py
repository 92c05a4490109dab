"""The local pool's prefetch: a chain of steps started on the pool before Beam asks for them.

``local_pool(prefetch=...)`` starts a chain of steps (``Ahead``) on the pool at once:
each step runs over elements and a side input that it derives from the chain's elements and the
step before's main outputs, as the graph does (``graph.work``: CountRanges and Parse over the
units, Parse with ``AsList(ranges)``; then Assign over Parse's batches with their counts, and
WriteShards over Assign's pieces grouped by shard). When Beam later runs that step, ``take`` hands
it these results for exactly the same work, element and side input (compared as pickles: a
side input or a GroupByKey's values as sorted lists); anything else waits for the prefetch to end
and is computed afresh, so an unused prefetch costs time, never a different output. The pool thus
runs each next step while Beam is still moving the last one's outputs between its stages.
"""
from __future__ import annotations

import hashlib
import logging
import pickle
import threading
from collections.abc import Callable, Iterable
from concurrent import futures
from concurrent.futures import Executor, Future
from typing import Any, NamedTuple

__all__ = ["TASKS_PER_PROCESS", "Ahead", "Prefetch", "as_side_input", "by_key", "group_values", "outputs_before", "tasks_of"]

TASKS_PER_PROCESS = 8  # a bundle is cut into about this many tasks per process: balance vs per-task overhead
log = logging.getLogger("shardprep")


def tasks_of(elements: list, processes: int) -> list[list]:
    """A step's elements cut into tasks for ``processes`` pool processes: about ``TASKS_PER_PROCESS``
    each, in order (``Pooled`` and the prefetch cut them alike)."""
    size = max(1, -(-len(elements) // (processes * TASKS_PER_PROCESS)))
    return [elements[lo:lo + size] for lo in range(0, len(elements), size)]


def _the_elements(elements: list, before: list) -> list:
    return elements


def _no_side_input(before: list) -> tuple:
    return ()


def outputs_before(elements: list, before: list) -> list:
    """``Ahead.over``: the step before's main outputs."""
    return before


def by_key(elements: list, before: list) -> list:
    """``Ahead.over``: the step before's main outputs, ``(key, value)`` pairs, as a GroupByKey gives
    them (``group_values``), in key order."""
    groups: dict[Any, list] = {}
    for key, value in before:
        groups.setdefault(key, []).append(value)
    return [(key, group_values(groups[key])) for key in sorted(groups, key=_pickled)]


def as_side_input(before: list) -> tuple:
    """``Ahead.side``: the step before's main outputs as the one side input (Beam's ``AsList``)."""
    return (before,)


class Ahead(NamedTuple):
    """A step of a prefetch chain (``local_pool``): its work, the elements it runs over (from the
    chain's elements and the step before's main outputs; default: the chain's elements) and its
    side inputs (from the step before's main outputs; default: none). The two functions run in
    the launcher and must give what Beam's graph gives the step."""

    work: Any  # a step's work (``graph.pool``)
    over: Callable[[list, list], list] = _the_elements
    side: Callable[[list], tuple] = _no_side_input


def group_values(values: Iterable[Any]) -> list:
    """A GroupByKey's values in one order whatever the runner's: sorted by their pickles."""
    return [value for _, value in sorted(((_pickled(v), v) for v in values), key=lambda pair: pair[0])]


def _pickled(value: Any) -> bytes:
    return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


def _side_key(side: tuple) -> bytes:
    """Side inputs compared as pickles, a list as its sorted items (runners give no order)."""
    parts = [sorted(_pickled(v) for v in s) if isinstance(s, list) else _pickled(s) for s in side]
    return hashlib.sha256(_pickled(parts)).digest()


class Prefetch:
    """The chain of steps a pool starts at once; ``take`` hands their results to Beam's steps.

    A thread of the launcher submits the first step's tasks, registers them, waits for them, then
    submits the next step's over the elements and side input it derives from those outputs
    (``Ahead``), and so on; it stops at a failed task (Beam's own step then raises that error) or
    when cancelled. A task is a few elements, as ``Pooled`` cuts a bundle (the side input is sent
    once per task), and gives each element's result apart. Until Beam asks for a step (``take``),
    at most ``early`` tasks run at once: a local pool leaves one core to the launcher, which is
    importing Beam and building the graph meanwhile.
    """

    def __init__(self, pool: Executor, processes: int, steps: list[tuple[bytes, bytes, Ahead]],
                 elements: list, run: Callable[[tuple[bytes, bytes, list, tuple]], list], *, early: int) -> None:
        """``steps``: (work key, pickled work, step); ``run``: what a pool process runs for a task of
        a step's elements (``pool.run_each``: a result per element); ``early``: the tasks that may
        run at once before Beam asks (at least one)."""
        self._pool, self._processes, self._steps, self._elements, self._run_task = pool, processes, steps, elements, run
        self._keys = {key for key, _, _ in steps}
        # by work key, by (element, side) digest: (the task, the element's place in it)
        self._results: dict[bytes, dict[bytes, tuple[Future, int]]] = {}
        self._changed = threading.Condition()
        self._early = max(1, early)
        self._asked = False  # Beam asked for a step: every task may run
        self._running = 0  # tasks started and not ended, for ``cancel``
        self._cancelled = False
        self._done = not steps
        self._thread = threading.Thread(target=self._run, name="shardprep-prefetch", daemon=True)
        if steps:
            self._thread.start()

    def _run(self) -> None:
        before: list = []
        try:
            for i, (key, blob, step) in enumerate(self._steps):
                elements = step.over(self._elements, before)
                side = step.side(before)
                chunks = tasks_of(elements, self._processes)
                tasks = []
                for chunk in chunks:
                    with self._changed:
                        self._changed.wait_for(lambda: self._asked or self._cancelled or self._running < self._early)
                        if self._cancelled:
                            return
                        self._running += 1
                        try:
                            task = self._pool.submit(self._run_task, (key, blob, chunk, side))
                        except RuntimeError as e:  # the pool broke (a process died) or was shut down
                            task = Future()
                            task.set_exception(e)  # for the step that takes it
                        tasks.append(task)
                    task.add_done_callback(self._free)
                side_key = _side_key(side)
                results = {_digest(e, side_key): (task, j) for chunk, task in zip(chunks, tasks)
                           for j, e in enumerate(chunk)}
                with self._changed:  # complete: ``take`` may hand it over
                    self._results[key] = results
                    self._changed.notify_all()
                if i + 1 == len(self._steps):
                    return
                before = []
                for task in tasks:
                    while not task.done() and not self._cancelled:
                        futures.wait([task], timeout=0.1)
                    if self._cancelled or task.cancelled() or task.exception() is not None:
                        return
                    before += [v for each in task.result() for tag, v in each[0] if tag is None]
        finally:
            with self._changed:
                self._done = True
                self._changed.notify_all()

    def _free(self, _result: object) -> None:
        with self._changed:
            self._running -= 1
            self._changed.notify_all()

    def _ask(self) -> None:
        """Beam runs the steps now: no more holding back."""
        with self._changed:
            self._asked = True
            self._changed.notify_all()

    def take(self, key: bytes, elements: list, side: tuple) -> list[tuple[Future, int]] | None:
        self._ask()
        if key in self._keys:
            side_key = _side_key(side)  # once: a side input may hold an entry per unit
            digests = [_digest(e, side_key) for e in elements]
            with self._changed:
                self._changed.wait_for(lambda: key in self._results or self._done)
                results = self._results.get(key, {})
                if all(d in results for d in digests):
                    return [results.pop(d) for d in digests]  # handed over: Beam holds the outputs from here on
            log.debug("prefetched results do not match this step's elements: computing them afresh")
        self.cancel(wait=True)
        return None

    def cancel(self, *, wait: bool) -> None:
        """Submits nothing more; with ``wait``, returns once every submitted task has ended (none
        writes after this), else at once (the pool is about to be terminated)."""
        with self._changed:
            self._cancelled = True
            self._changed.notify_all()  # the thread may wait for a slot
        if wait:
            with self._changed:
                self._changed.wait_for(lambda: self._running == 0)
        if self._thread.is_alive():
            self._thread.join()


def _digest(element: Any, side_key: bytes) -> bytes:
    """An element and side input, compared: a GroupByKey's ``(key, values)`` as its key and values
    pickled apart (a pickle of them all would differ where values share an object in one process
    and not in another)."""
    digest = hashlib.sha256(side_key)
    if isinstance(element, tuple) and len(element) == 2 and isinstance(element[1], list):
        for part in (element[0], *element[1]):
            blob = _pickled(part)
            digest.update(len(blob).to_bytes(8, "little") + blob)
    else:
        digest.update(_pickled(element))
    return digest.digest()
