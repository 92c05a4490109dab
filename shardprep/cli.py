"""What every command-line tool shares: logging set-up and one readable line per error.

``main`` is the one place that maps errors to exit codes (``shardprep.errors``): a
``UsageError`` (bad flag, bad input, refused plan, bad manifest) exits 2, an interrupt 130, a
failed run (``RunError``) or anything unexpected 1. The line printed is the error's message
(for an unexpected error its type and last line, the original error of a failed pipeline); the
traceback is logged only with ``--verbose``.
"""
from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Sequence

from shardprep.errors import RunError, UsageError

__all__ = ["EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_USAGE", "UsageError", "configure_logging", "main"]

EXIT_USAGE = 2
EXIT_FAILED = 1
EXIT_INTERRUPTED = 130


def configure_logging(verbose: bool = False) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("[%(name)s] %(message)s"))
    logger = logging.getLogger("shardprep")
    logger.handlers[:] = [handler]
    logger.setLevel(logging.DEBUG if verbose else logging.INFO)
    logger.propagate = False
    logging.getLogger().setLevel(logging.WARNING)


def _one_line(error: BaseException) -> str:
    """The whole message of an expected error, its lines joined."""
    return " ".join(line.strip() for line in str(error).splitlines() if line.strip()) or type(error).__name__


def _last_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    return lines[-1] if lines else type(error).__name__


def main(prog: str, body: Callable[[Sequence[str] | None], int], argv: Sequence[str] | None = None) -> int:
    """Runs ``body`` and turns any error into one line on stderr and its exit code."""
    log = logging.getLogger("shardprep")
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
