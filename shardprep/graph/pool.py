"""Every core of one machine for the steps that do the work, inside Beam's in-process DirectRunner.

Beam's multi-processing DirectRunner starts each SDK worker as a fresh interpreter (~3.5 CPU s of
imports each on a small machine) and sends every element through gRPC; on a few cores that
start-up costs as much as it saves below a few hundred MB. Here the run stays in the in-process
DirectRunner, and the DoFns that do the work (CountRanges, Parse, Assign, WriteShards) are wrapped in
``Pooled``: it collects its bundle's elements and hands them, a few at a time, to processes forked
from the launcher once the job is planned (``local_pool``), so they start with everything already
imported (~0.1 CPU s each, measured; a fork server that imports it costs ~2.3 CPU s per run).
Results come back in element order, and every element is processed by the same code as in line,
so the output does not depend on the number of processes. Elements are small (work units,
references to spilled batches): the record bytes travel through the spill files, not the pool.

The fork happens before the pipeline starts, when the launcher's only other thread is the
lease renewer (``shardprep.lease``), which holds no lock a pool process takes; fsspec and logging
reset their own locks in a forked child. Where fork is not the platform's safe default (not
Linux) the processes come from a fork server instead.

On any other runner, or where no pool runs in the process (a remote worker), ``Pooled`` runs its
DoFn in line. Beam's metrics do not reach a pool process: the DoFns count with ``Counter``, which a
pool process tallies and ``Pooled`` adds to the step's Beam counters.
"""
from __future__ import annotations

import collections
import contextlib
import hashlib
import logging
import multiprocessing
import pickle
import signal
import sys
import uuid
from collections.abc import Iterator
from multiprocessing.pool import Pool
from typing import Any

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.pvalue import TaggedOutput
from apache_beam.transforms.window import GlobalWindow
from apache_beam.typehints.decorators import no_annotations
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from shardprep import lease

__all__ = ["Counter", "Pooled", "local_pool", "pooled"]

NAMESPACE = "shardprep"
PRELOAD = ["shardprep.graph.parse", "shardprep.graph.stages"]  # what a fork server imports once (not Linux)
TASKS_PER_PROCESS = 8  # a bundle is cut into about this many tasks per process: balance vs per-task overhead
_POOLS: dict[str, tuple[Pool, int]] = {}  # in the launcher: the running pools and their sizes, by token
_tally: collections.Counter | None = None  # in a pool process, during a task: what its Counters counted
_dofns: dict[bytes, beam.DoFn] = {}  # in a pool process: the DoFn of the step it runs, set up once
_records: list[logging.LogRecord] = []  # in a pool process, during a task: its log records, for the launcher

log = logging.getLogger("shardprep")


class Counter:
    """A Beam counter of this product's namespace that also counts in a pool process."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._beam = Metrics.counter(NAMESPACE, name)

    def inc(self, n: int = 1) -> None:
        if _tally is not None:
            _tally[self._name] += n
        else:
            self._beam.inc(n)


@contextlib.contextmanager
def local_pool(processes: int) -> Iterator[str]:
    """Starts ``processes`` pool processes for one run; yields the token ``pooled`` names the pool by.

    The processes ignore SIGINT (the launcher handles it), send their log records back with their
    results (the launcher logs them, in element order), and are terminated when the run ends,
    however it ends.
    """
    if sys.platform == "linux":
        ctx = multiprocessing.get_context("fork")
    else:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(PRELOAD)
    pool = ctx.Pool(processes, initializer=_start_process, initargs=(log.getEffectiveLevel(),))
    token = uuid.uuid4().hex
    _POOLS[token] = pool, processes
    try:
        yield token
    finally:
        del _POOLS[token]
        pool.terminate()
        pool.join()


def pooled(dofn: beam.DoFn, token: str | None) -> beam.DoFn:
    """``dofn`` run on the pool named ``token``, or ``dofn`` itself where there is none."""
    return Pooled(dofn, token) if token else dofn


class Pooled(beam.DoFn):
    """Runs ``dofn`` over each bundle's elements in the pool ``token`` (see the module docs).

    Side inputs must be the same for every element of a bundle (global window, as in this
    product's graph); outputs are emitted at the end of the bundle, in element order.
    """

    def __init__(self, dofn: beam.DoFn, token: str) -> None:
        self._dofn = dofn
        self._token = token

    def setup(self) -> None:
        self._blob = pickle.dumps(self._dofn, protocol=pickle.HIGHEST_PROTOCOL)
        self._key = hashlib.sha256(self._blob).digest()
        self._inline: beam.DoFn | None = None

    def start_bundle(self) -> None:
        self._elements: list[Any] = []
        self._side: tuple = ()

    @no_annotations  # Beam would read ``*side: Any`` as a type hint on the side inputs
    def process(self, element: Any, *side: Any) -> Iterator[Any]:
        if isinstance(element, tuple) and len(element) == 2:  # (key, values) of a GroupByKey: a lazy iterable
            element = (element[0], _plain(element[1]))
        self._elements.append(element)
        self._side = side
        return iter(())  # the outputs come at the end of the bundle

    def finish_bundle(self) -> Iterator[Any]:
        elements, side = self._elements, tuple(_plain(s) for s in self._side)
        self._elements = []
        if not elements:
            return
        if self._token not in _POOLS:
            yield from self._run_inline(elements, side)
            return
        pool, processes = _POOLS[self._token]
        size = -(-len(elements) // (processes * TASKS_PER_PROCESS))
        tasks = ((self._key, self._blob, elements[i:i + size], side) for i in range(0, len(elements), size))
        tally: collections.Counter = collections.Counter()
        for outputs, counted, records in pool.imap(_run_task, tasks):
            tally.update(counted)
            for record in records:
                logging.getLogger(record.name).handle(record)
            for tag, value in outputs:
                yield _windowed(tag, value)
        for name, n in sorted(tally.items()):
            Metrics.counter(NAMESPACE, name).inc(n)

    def _run_inline(self, elements: list, side: tuple) -> Iterator[Any]:
        if self._inline is None:
            self._inline = pickle.loads(self._blob)
            self._inline.setup()
        for element in elements:
            for out in self._inline.process(element, *side) or ():
                yield _windowed(*_split(out))

    def teardown(self) -> None:
        if getattr(self, "_inline", None) is not None:
            self._inline.teardown()


def _plain(value: Any) -> Any:
    """``value`` as one that pickles: Beam hands an ``AsList`` side input and a GroupByKey's values
    over as lazy iterables of its own."""
    return list(value) if type(value).__module__.startswith("apache_beam") else value


def _split(out: Any) -> tuple[str | None, Any]:
    return (out.tag, out.value) if isinstance(out, TaggedOutput) else (None, out)


def _windowed(tag: str | None, value: Any) -> Any:
    windowed = WindowedValue(value, MIN_TIMESTAMP, (GlobalWindow(),))
    return windowed if tag is None else TaggedOutput(tag, windowed)


class _Collect(logging.Handler):
    """In a pool process: keeps this product's log records, as text, for the launcher."""

    def emit(self, record: logging.LogRecord) -> None:
        record.msg, record.args = record.getMessage(), None
        if record.exc_info:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
            record.exc_info = None
        _records.append(record)


def _start_process(level: int) -> None:
    """In each pool process: leave SIGINT to the launcher, die on SIGTERM (the launcher's handlers
    came with the fork); keep log records at the launcher's level."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    logger = logging.getLogger("shardprep")
    logger.handlers[:] = [_Collect()]
    logger.setLevel(level)
    logger.propagate = False


def _run_task(task: tuple[bytes, bytes, list, tuple]) -> tuple[list, dict[str, int], list[logging.LogRecord]]:
    """In a pool process: the outputs of ``elements`` (tag, value), what the DoFn counted, its log records."""
    global _tally
    key, blob, elements, side = task
    dofn = _dofns.get(key)
    if dofn is None:
        for old in _dofns.values():
            old.teardown()
        _dofns.clear()
        dofn = _dofns[key] = pickle.loads(blob)
        dofn.setup()
    lease.pause("pool.task")  # test hook (race and interrupt tests)
    _tally = collections.Counter()
    try:
        outputs = [_split(out) for element in elements for out in dofn.process(element, *side) or ()]
        return outputs, dict(_tally), list(_records)
    finally:
        _tally = None
        _records.clear()
