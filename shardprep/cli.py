"""What every command-line tool shares: logging set-up and one readable line per error."""
from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Sequence

__all__ = ["UsageError", "configure_logging", "main"]


class UsageError(ValueError):
    """A problem the user can fix by changing the command line or the input."""


def configure_logging(verbose: bool = False) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("[%(name)s] %(message)s"))
    logger = logging.getLogger("shardprep")
    logger.handlers[:] = [handler]
    logger.setLevel(logging.DEBUG if verbose else logging.INFO)
    logger.propagate = False
    logging.getLogger().setLevel(logging.WARNING)


def _last_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    return lines[-1] if lines else type(error).__name__


def main(prog: str, body: Callable[[Sequence[str] | None], int], argv: Sequence[str] | None = None) -> int:
    """Runs ``body`` and turns any error into one line on stderr and a non-zero exit code.

    Expected problems (bad flags, bad input, refused plans) exit 2; anything else exits 1 with the
    last line of its message, which for a failed pipeline is the original error.
    """
    from shardprep import manifest, planning, schema, sources

    expected = (UsageError, planning.PlanError, sources.InputError, schema.SchemaError, manifest.ManifestError)
    try:
        return body(argv)
    except expected as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - the CLI contract is one line, never a traceback
        logging.getLogger("shardprep").debug("traceback", exc_info=True)
        print(f"{prog}: error: {type(e).__name__}: {_last_line(e)} (rerun with --verbose for details)", file=sys.stderr)
        return 1
