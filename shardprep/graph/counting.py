"""What the job's stages count, and where the counts go: a ``Sink`` each engine provides.

A stage's work keeps ``Counter`` s (``Counter("records_read").inc(n)``) and knows nothing of the
engine: each ``inc`` goes to this process's current sink. The local and Dask engines tally a task's
counts and send them back with its outputs (``Tally``, installed for the task by
``graph.tasks``); the Beam engine installs a sink that reports them as Beam counters
(``pipelines.beam_graph``). Where no engine installed one, counts are dropped (``Discard``): a
stage's work run by hand, in a test, counts nothing anywhere. Nothing here imports an engine.
"""
from __future__ import annotations

import collections
import contextlib
from collections.abc import Iterator
from typing import Protocol

__all__ = ["NAMESPACE", "Counter", "Discard", "Sink", "Tally", "counting_into", "install"]

NAMESPACE = "shardprep"  # the counters' namespace where an engine has namespaces (Beam's metrics)


class Sink(Protocol):
    """Where counts go: ``inc(name, n)`` adds ``n`` to the counter ``name``."""

    def inc(self, name: str, n: int) -> None:
        ...


class Discard:
    """The sink where no engine installed one: counts are dropped."""

    def inc(self, name: str, n: int) -> None:
        pass


class Tally(collections.Counter):
    """A sink that keeps the counts (name -> total), for an engine to send or sum."""

    def inc(self, name: str, n: int) -> None:
        self[name] += n


_sink: Sink = Discard()  # this process's: one at a time (a task, a stage run in line, a Beam worker)


def install(sink: Sink) -> Sink:
    """Makes ``sink`` this process's sink; returns the one it replaces."""
    global _sink
    previous, _sink = _sink, sink
    return previous


@contextlib.contextmanager
def counting_into(sink: Sink) -> Iterator[Sink]:
    """``sink`` is this process's sink inside the block; the one before it after."""
    previous = install(sink)
    try:
        yield sink
    finally:
        install(previous)


class Counter:
    """A counter of this product's namespace, by name: each ``inc`` goes to the current sink."""

    def __init__(self, name: str) -> None:
        self._name = name

    def inc(self, n: int = 1) -> None:
        _sink.inc(self._name, n)
