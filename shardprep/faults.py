"""The fault-injection hook of the race and interrupt tests: ``pause(point)`` sleeps at a named point.

The lease, the commit, the process pool, the run and retention call it at the points where another
process may act (``lease.create``, ``commit.leased``, ``pool.task``, ``run.planned``, ...). It
does nothing unless ``SHARDPREP_TEST_DELAYS`` names the point, or ``*`` (``point=seconds,*=seconds``):
production runs pay one environment lookup per point.
"""
from __future__ import annotations

import os
import time

__all__ = ["pause"]


def pause(point: str) -> None:
    """Sleeps at ``point`` for the seconds ``SHARDPREP_TEST_DELAYS`` gives it (or ``*``); else returns at once."""
    spec = os.environ.get("SHARDPREP_TEST_DELAYS")
    if not spec:
        return
    delays = dict(item.split("=", 1) for item in spec.split(",") if "=" in item)
    seconds = delays.get(point, delays.get("*"))
    if seconds:
        time.sleep(float(seconds))
