"""A result of the run computed once for all processes: the first to claim it computes and spills it, the others read it.

``shared(url, compute, encode=..., decode=...)``: where the spill file ``url`` holds the result, it
is read; else the process that claims it (``url + ".claim"``, created only if absent:
``versioned.create_exclusive``) computes it and spills it, and every other process waits for the
file. The result must depend on the run's inputs alone, so that whoever computes it gets the same
bytes: a process that waits more than ``WAIT_S``, or finds that the claimer failed (``url +
".failed"``), computes it itself; a retried task finds it spilled. Used by ``--dedup exact``'s
Assign (``graph.duplicates.Duplicates``): one process sorts the run's record hashes, not each one.
"""
from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import TypeVar

from shardprep import fs, versioned
from shardprep.graph.spill import spill

__all__ = ["WAIT_S", "shared"]

WAIT_S = 120.0  # past this a waiting process computes the result itself (a claimer killed, or a slow one)
_FIRST_PAUSE_S, _MAX_PAUSE_S = 0.005, 0.25  # the waiters' polls, doubling

T = TypeVar("T")


def _spilled(url: str, decode: Callable[[bytes], T]) -> T | None:
    try:
        return decode(fs.read_bytes(url))
    except FileNotFoundError:
        return None


def shared(url: str, compute: Callable[[], T], *, encode: Callable[[T], bytes], decode: Callable[[bytes], T],
           wait_s: float = WAIT_S) -> T:
    """The result at ``url``: read, computed here (claimed, or waited for in vain), or waited for."""
    found = _spilled(url, decode)
    if found is not None:
        return found
    if versioned.create_exclusive(url + ".claim", b""):
        try:
            result = compute()
        except BaseException:
            with contextlib.suppress(OSError):  # the waiters compute it themselves at once
                spill(url + ".failed", b"")
            raise
        spill(url, encode(result))
        return result
    deadline, pause = time.monotonic() + wait_s, _FIRST_PAUSE_S
    while time.monotonic() < deadline and not fs.exists(url + ".failed"):
        time.sleep(pause)
        pause = min(2 * pause, _MAX_PAUSE_S)
        found = _spilled(url, decode)
        if found is not None:
            return found
    result = compute()
    spill(url, encode(result))  # the same bytes as any other process's
    return result
