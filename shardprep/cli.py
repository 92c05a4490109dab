"""What every command-line tool shares: logging set-up and one readable line per error.

``main`` is the one place that maps errors to exit codes (``shardprep.errors``): a
``UsageError`` (bad flag, bad input, refused plan, bad manifest) exits 2, an interrupt 130, a
failed run (``RunError``) or anything unexpected 1. The line printed is the error's message
(for an unexpected error its type and last line, the original error of a failed pipeline); the
traceback is logged only with ``--verbose``.
"""
from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import NoReturn

from shardprep.display import shown
from shardprep.errors import RunError, UsageError

__all__ = ["EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_USAGE", "SafeFormatter", "UsageError", "configure_logging", "exit_now",
           "exit_early_on_interrupt", "main", "safe"]

EXIT_USAGE = 2
EXIT_FAILED = 1
EXIT_INTERRUPTED = 130


# log lines, error lines and anything else printed from names and data go through the one escape
safe = shown


class SafeFormatter(logging.Formatter):
    """One line per record, its message escaped by ``safe``; a traceback only where asked (``--verbose``)."""

    def __init__(self, fmt: str, *, tracebacks: bool) -> None:
        super().__init__(fmt)
        self._tracebacks = tracebacks

    def format(self, record: logging.LogRecord) -> str:
        record = logging.makeLogRecord(record.__dict__)
        record.msg, record.args = safe(record.getMessage()), None
        if not self._tracebacks:
            record.exc_info, record.exc_text, record.stack_info = None, None, None
        return super().format(record)


# Beam logs a failed pipeline as "ERROR ... Traceback" before raising; the CLI prints the error once
_QUIET_UNLESS_VERBOSE = ("apache_beam", "distributed", "tornado", "absl")


class _Quiet(logging.Filter):
    """Drops the records of ``_QUIET_UNLESS_VERBOSE``'s loggers below ``level``, whatever level a
    library gives its loggers later: distributed sets its own to INFO when it is imported (scheduler
    and nanny chatter on every Dask run)."""

    def __init__(self, level: int) -> None:
        super().__init__()
        self._level = level

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= self._level or not any(
            record.name == name or record.name.startswith(name + ".") for name in _QUIET_UNLESS_VERBOSE)


def configure_logging(verbose: bool = False) -> None:
    """``[shardprep] message`` lines on stderr, escaped; third-party warnings kept, their tracebacks only with --verbose."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(SafeFormatter("[%(name)s] %(message)s", tracebacks=verbose))
    handler.addFilter(_Quiet(logging.WARNING if verbose else logging.CRITICAL))
    logger = logging.getLogger("shardprep")
    logger.handlers[:] = [handler]
    logger.setLevel(logging.DEBUG if verbose else logging.INFO)
    logger.propagate = False
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
    for name in _QUIET_UNLESS_VERBOSE:
        logging.getLogger(name).setLevel(logging.WARNING if verbose else logging.CRITICAL)


def _one_line(error: BaseException) -> str:
    """The whole message of an expected error, its lines joined, escaped."""
    return safe(" ".join(line.strip() for line in str(error).splitlines() if line.strip()) or type(error).__name__)


def _last_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    return safe(lines[-1]) if lines else type(error).__name__


def _raise_interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


def main(prog: str, body: Callable[[Sequence[str] | None], int], argv: Sequence[str] | None = None) -> int:
    """Runs ``body`` and turns any error into one line on stderr and its exit code; SIGTERM ends it as
    Ctrl-C does (a ``KeyboardInterrupt``, exit 130), so that its ``with`` blocks clean up."""
    log = logging.getLogger("shardprep")
    previous = {}
    if threading.current_thread() is threading.main_thread():
        previous = {sig: signal.signal(sig, _raise_interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        return body(argv)
    except UsageError as e:
        log.debug("traceback", exc_info=True)
        print(f"{prog}: error: {_one_line(e)}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except RunError as e:
        log.debug("traceback", exc_info=True)
        print(f"{prog}: error: {_one_line(e)}", file=sys.stderr)
        return EXIT_FAILED
    except Exception as e:  # noqa: BLE001 - the CLI contract is one line, never a traceback
        log.debug("traceback", exc_info=True)
        print(f"{prog}: error: {type(e).__name__}: {_last_line(e)} (rerun with --verbose for details)", file=sys.stderr)
        return EXIT_FAILED
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def exit_early_on_interrupt(prog: str) -> None:
    """For a command's ``__main__``, before its imports: a signal then (before ``main`` runs, nothing
    written yet) ends it with one line and 130 instead of a traceback or a silent SIGTERM death."""
    def handler(_signum: int, _frame: object) -> None:
        os.write(2, f"{prog}: interrupted\n".encode())
        os._exit(EXIT_INTERRUPTED)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, handler)


def exit_now(code: int) -> NoReturn:
    """Ends a command's process with ``code`` once its output is flushed, without the interpreter's
    teardown (after importing Beam, a sizeable share of a small run's CPU). Only from ``__main__``, once ``main`` has returned: the run's own clean-up (pool, lease,
    Dask cluster, run folder) is done by then, in its ``with`` blocks."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)
