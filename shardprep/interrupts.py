"""Ctrl-C and SIGTERM during a re-shard: exit 130 with one line, and no leftovers in the output.

Beam's runners catch a ``KeyboardInterrupt`` raised in their threads and re-raise it as some
other error (``RuntimeError: KeyboardInterrupt``); the handler here remembers the signal, so the
run ends as an interrupt whatever the runner turned it into. An interrupted run's folder (its
spill: hundreds of MB) is removed by ``retention.discard_run``, the one home of that clean-up.
"""
from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

from shardprep import retention

__all__ = ["discarding_on_interrupt"]


@contextlib.contextmanager
def discarding_on_interrupt(root: str, run_id: str) -> Iterator[None]:
    """Runs the body with SIGINT/SIGTERM raising ``KeyboardInterrupt``; cleans up the run on the way out."""
    signals: list[int] = []

    def handler(signum: int, _frame: object) -> None:
        first = not signals
        signals.append(signum)
        if first:
            raise KeyboardInterrupt

    previous = {}
    if threading.current_thread() is threading.main_thread():
        previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    except BaseException as e:
        if signals or isinstance(e, KeyboardInterrupt):  # whatever error the runner made of it
            retention.discard_run(root, run_id, whole=True)
            raise KeyboardInterrupt from None
        raise  # a failure: ``pipelines.reshard`` removes the spill (the same ``retention.discard_run``)
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
