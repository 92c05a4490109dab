"""Beam's side of the steps' work: ``InLine`` runs it in the Beam worker, ``Pooled`` on a pool
(the local one, or a Dask cluster's workers: ``graph.pool``).

The work of every step (``graph.parse``, ``graph.ranges``, ``graph.stages``, ``graph.units``) is
plain Python that never imports Beam (``graph.pool`` gives the contract), so that the pool's
processes, forked before the launcher imports Beam, never do. These two DoFns are the only place
that work meets Beam: outputs become Beam's windowed values, ``Tagged`` ones ``TaggedOutput``.
"""
from __future__ import annotations

import collections
import logging
from collections.abc import Iterator
from concurrent.futures.process import BrokenProcessPool
from typing import Any

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.pvalue import TaggedOutput
from apache_beam.transforms.window import GlobalWindow
from apache_beam.typehints.decorators import no_annotations
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from shardprep import malloc
from shardprep.graph import pool
from shardprep.graph.pool import NAMESPACE, Work
from shardprep.graph.prefetch import group_values, tasks_of

__all__ = ["InLine", "Pooled", "pooled"]


def pooled(work: Work, token: str | None) -> beam.DoFn:
    """``work`` as a DoFn: on the pool named ``token``, or in line where there is none."""
    return Pooled(work, token) if token else InLine(work)


@beam.typehints.with_output_types(Any)  # declared: Beam would otherwise infer it from process's bytecode
class InLine(beam.DoFn):
    """Runs ``work`` in the Beam worker, element by element."""

    def __init__(self, work: Work) -> None:
        self._work = work

    def default_label(self) -> str:  # the step's labels name the work: ``ParDo(Parse)``
        return type(self._work).__name__

    def setup(self) -> None:
        malloc.keep_freed_memory()  # this process runs the steps (the launcher, a Dask or Dataflow worker)
        getattr(self._work, "setup", lambda: None)()

    @no_annotations  # Beam would read ``*side: Any`` as a type hint on the side inputs
    def process(self, element: Any, *side: Any) -> Iterator[Any]:
        for out in self._work.process(element, *side) or ():
            tag, value = pool.split_output(out)
            yield value if tag is None else TaggedOutput(tag, value)

    def finish_bundle(self) -> None:  # what the work left to finish in the background (``pool.run_task``)
        getattr(self._work, "flush", lambda: None)()

    def teardown(self) -> None:
        getattr(self._work, "teardown", lambda: None)()


@beam.typehints.with_output_types(Any)
class Pooled(beam.DoFn):
    """Runs ``work`` over each bundle's elements in the pool ``token`` (see ``graph.pool``).

    Side inputs must be the same for every element of a bundle (global window, as in this
    product's graph); a GroupByKey's values come sorted (``graph.prefetch.group_values``); outputs are
    emitted at the end of the bundle, in element order. On a process without that pool (a remote
    worker) the work runs in line.
    """

    def __init__(self, work: Work, token: str) -> None:
        self._work = work
        self._token = token

    def default_label(self) -> str:
        return type(self._work).__name__

    def setup(self) -> None:
        self._key, self._blob = pool.blob_of(self._work)
        self._inline: InLine | None = None

    def start_bundle(self) -> None:
        self._elements: list[Any] = []
        self._side: tuple = ()

    @no_annotations
    def process(self, element: Any, *side: Any) -> Iterator[Any]:
        if isinstance(element, tuple) and len(element) == 2:  # (key, values) of a GroupByKey: a lazy iterable,
            element = (element[0], group_values(_plain(element[1])))  # in one order whatever the runner
        self._elements.append(element)
        self._side = side
        return iter(())  # the outputs come at the end of the bundle

    def finish_bundle(self) -> Iterator[Any]:
        elements, side = self._elements, tuple(_plain(s) for s in self._side)
        self._elements = []
        if not elements:
            return
        running = pool.pool_of(self._token)
        if running is None:
            yield from self._run_inline(elements, side)
            return
        try:
            yield from self._run_pooled(running, elements, side)
        except BrokenProcessPool as e:  # a process killed (OOM): the run fails, never waits for its task
            raise pool.PoolDied() from e

    def _run_pooled(self, running: pool.Running, elements: list, side: tuple) -> Iterator[Any]:
        results: Any = pool.take(self._token, self._key, elements, side)
        if results is not None:  # started before Beam ran this step (graph.prefetch)
            results = _each_once(results)
        else:
            results = running.executor.map(running.task, [(self._key, self._blob, task, side)
                                                          for task in tasks_of(elements, running.processes)])
        tally: collections.Counter = collections.Counter()
        for outputs, counted, records in results:
            tally.update(counted)
            for record in records:
                logging.getLogger(record.name).handle(record)
            for tag, value in outputs:
                yield _windowed(tag, value)
        for name, n in sorted(tally.items()):
            Metrics.counter(NAMESPACE, name).inc(n)

    def _run_inline(self, elements: list, side: tuple) -> Iterator[Any]:
        if self._inline is None:
            self._inline = InLine(self._work)
            self._inline.setup()
        for element in elements:
            for out in self._inline.process(element, *side):
                yield _windowed(*pool.split_output(out))
        self._inline.finish_bundle()

    def teardown(self) -> None:
        if getattr(self, "_inline", None) is not None:
            self._inline.teardown()


def _each_once(taken: list) -> Iterator[Any]:
    """Prefetched results, each element's (its task, its place in the task's results), let go as
    they are read: ``Executor.map`` does as much, so a step's outputs are not held twice."""
    taken.reverse()
    while taken:
        task, place = taken.pop()
        yield task.result()[place]


def _plain(value: Any) -> Any:
    """``value`` as one that pickles: Beam hands an ``AsList`` side input and a GroupByKey's values
    over as lazy iterables of its own."""
    return list(value) if type(value).__module__.startswith("apache_beam") else value


def _windowed(tag: str | None, value: Any) -> Any:
    windowed = WindowedValue(value, MIN_TIMESTAMP, (GlobalWindow(),))
    return windowed if tag is None else TaggedOutput(tag, windowed)
