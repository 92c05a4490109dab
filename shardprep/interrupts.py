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
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from shardprep import retention

__all__ = ["SWALLOWED_AFTER_S", "committed_anyway", "discarding_on_failure"]

SWALLOWED_AFTER_S = 1.0  # a signal this long after the first raises again (``discarding_on_failure``)
log = logging.getLogger("shardprep")


@contextlib.contextmanager
def discarding_on_failure(root: str, run_id: str) -> Iterator[None]:
    """Runs the body with SIGINT/SIGTERM raising ``KeyboardInterrupt``; on an interrupt or a failure
    removes the run's folder on the way out, once the body's ``with`` blocks have stopped every
    process of the run (the local pool, a local Dask cluster), unless the run was committed."""
    signals: list[float] = []  # when each came
    cleaning = threading.Event()

    def handler(_signum: int, _frame: object) -> None:
        signals.append(time.monotonic())
        # The first signal raises. Python ignores an exception raised where it runs a garbage
        # collector callback (as distributed installs) or a __del__, and the run went on: a later
        # signal raises again, once a second has passed and the clean-up has not begun (a second
        # Ctrl-C at once, or during the clean-up, would cut the clean-up short).
        if len(signals) == 1 or (not cleaning.is_set() and signals[-1] - signals[0] > SWALLOWED_AFTER_S):
            raise KeyboardInterrupt

    def unraisable(info: Any) -> None:  # such a swallowed KeyboardInterrupt printed its traceback
        if not isinstance(info.exc_value, KeyboardInterrupt):
            hook(info)

    previous, hook = {}, sys.unraisablehook
    if threading.current_thread() is threading.main_thread():
        previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
        sys.unraisablehook = unraisable
    try:
        yield
        if signals:  # its KeyboardInterrupt was swallowed (above), and the run ended anyway
            raise KeyboardInterrupt
    except BaseException as e:
        cleaning.set()
        interrupted = bool(signals) or isinstance(e, KeyboardInterrupt)  # whatever error the runner made of it
        if retention.discard_run(root, run_id, whole=True):
            _say_committed("interrupted" if interrupted else f"failed ({e})", root, run_id)
            return
        if interrupted:
            raise KeyboardInterrupt from None
        raise
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
        if previous:
            sys.unraisablehook = hook


def committed_anyway(root: str, run_id: str) -> bool:
    """For an interrupt whose handler ran once ``discarding_on_failure`` had ended (Python runs it
    when the main thread next runs Python code, e.g. once a wait on a Dask worker's commit
    returns): whether the run is committed, and then says so; the command ends committed (exit 0),
    not interrupted."""
    try:
        committed = run_id in retention.current_runs(root)
    except OSError:  # the folder cannot be read now: the interrupt stands
        return False
    if committed:
        _say_committed("interrupted", root, run_id)
    return committed


def _say_committed(what: str, root: str, run_id: str) -> None:
    log.warning("%s after run %s was committed: %s holds its complete data set", what, run_id, root)
