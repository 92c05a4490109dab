"""What a worker process runs for a task of one stage, whatever engine started it.

A task is ``(work key, pickled work, elements, side inputs)`` (``pipelines.pool`` cuts a stage's
elements into tasks and hands them to the engine's processes). ``run_task`` keeps the work set up
between tasks of one stage in a process, and sends back its outputs, what its ``Counter`` s counted
(``graph.counting.Tally``) and the log records of this product it emitted (``collect_logs``);
``run_inline`` runs a stage in the calling process. ``helper``: work beside a step's, on a thread
where a core is free, in line in a process of the local pool (``in_worker``). Nothing here starts
a process or imports an engine.
"""
from __future__ import annotations

import logging
import pickle
from typing import Any

from shardprep import background, faults, malloc
from shardprep.graph.counting import Tally, counting_into
from shardprep.graph.elements import Tagged

__all__ = ["TaskResult", "Work", "collect_logs", "helper", "in_worker", "mark_pool_process", "run_inline",
           "run_task", "split_output"]

Work = Any  # a stage's work: process(element, *side) -> outputs; optional setup(), flush() -> outputs, teardown()
TaskResult = tuple[list, dict[str, int], list[logging.LogRecord]]  # outputs (tag, value), counters, log records


class _Process:
    """What this process keeps for the tasks it runs (one instance, ``_here``)."""

    def __init__(self) -> None:
        self.work: tuple[bytes, Work] = (b"", None)  # in a worker: (key, work) of the stage it runs, set up once
        self.records: list[logging.LogRecord] = []  # in a worker, during a task: its log records, for the launcher
        self.worker = False  # a process of the local pool (``in_worker``)


_here = _Process()


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


def collect_logs(level: int) -> None:
    """In a worker: this product's log records at ``level`` and above are kept for the launcher
    (``run_task`` returns them), not printed here; freed memory is kept (``shardprep.malloc``)."""
    malloc.keep_freed_memory()  # the steps free large buffers: let malloc keep them
    logger = logging.getLogger("shardprep")
    logger.handlers[:] = [_Collect()]
    logger.setLevel(level)
    logger.propagate = False


def mark_pool_process() -> None:
    """This process is one of the local pool's, one per core (``in_worker``)."""
    _here.worker = True


def run_task(task: tuple[bytes, bytes, list, tuple]) -> TaskResult:
    """In a worker: the outputs of ``elements`` (tag, value), what the work counted, its log
    records; the work flushed (what it left to finish in the background is done) before they go back."""
    key, blob, elements, side = task
    if _here.work[0] != key:  # the first task of a stage here: the last stage's work torn down
        getattr(_here.work[1], "teardown", lambda: None)()
        _here.work = key, pickle.loads(blob)
        getattr(_here.work[1], "setup", lambda: None)()
    work = _here.work[1]
    faults.pause("pool.task")  # test hook (race and interrupt tests)
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
    with counting_into(Tally()) as tally:
        outputs = [split_output(out) for element in elements for out in work.process(element, *side) or ()]
        outputs += [split_output(out) for out in getattr(work, "flush", lambda: None)() or ()]
        return outputs, dict(tally)
