"""Ctrl-C, SIGTERM and failures during a re-shard: exit 130 (or 1) with one line, no leftovers.

Beam's runners catch a ``KeyboardInterrupt`` raised in their threads and re-raise it as some
other error (``RuntimeError: KeyboardInterrupt``); the handler here remembers the signal, so the
run ends as an interrupt whatever the runner turned it into. An interrupted or failed run's folder
(its spill: hundreds of MB) is removed by ``retention.discard_run``, the one home of that clean-up,
unless its commit got there first: an interrupt that comes after the manifest was written ends
the run as committed (exit 0, its summary printed), since the data set is complete.
"""
from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Iterator

from shardprep import retention

__all__ = ["discarding_on_failure"]

log = logging.getLogger("shardprep")


@contextlib.contextmanager
def discarding_on_failure(root: str, run_id: str) -> Iterator[None]:
    """Runs the body with SIGINT/SIGTERM raising ``KeyboardInterrupt``; on an interrupt or a failure
    removes the run's folder on the way out, once the body's ``with`` blocks have stopped every
    process of the run (the local pool, a local Dask cluster), unless the run was committed."""
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
        interrupted = bool(signals) or isinstance(e, KeyboardInterrupt)  # whatever error the runner made of it
        if retention.discard_run(root, run_id, whole=True):
            log.warning("%s after run %s was committed: %s holds its complete data set",
                        "interrupted" if interrupted else f"failed ({e})", run_id, root)
            return
        if interrupted:
            raise KeyboardInterrupt from None
        raise
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
