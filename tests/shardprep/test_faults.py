"""``faults.pause``: sleeps at a point ``SHARDPREP_TEST_DELAYS`` names (or ``*``), else returns at once."""
from __future__ import annotations

import time

import pytest

from shardprep import faults


def _seconds(point: str) -> float:
    started = time.monotonic()
    faults.pause(point)
    return time.monotonic() - started


@pytest.mark.parametrize("spec, point, slept", [
    (None, "commit.leased", False),
    ("commit.leased=0.3", "commit.leased", True),
    ("commit.leased=0.3", "commit.written", False),
    ("commit.leased=0,*=0.3", "commit.leased", False),  # its own entry wins over *
    ("commit.leased=0,*=0.3", "run.planned", True),
    ("bad,run.planned=0.3", "run.planned", True),  # an entry without '=' is left out
])
def test_pause_sleeps_only_where_the_environment_names_the_point(monkeypatch, spec, point, slept):
    if spec is None:
        monkeypatch.delenv("SHARDPREP_TEST_DELAYS", raising=False)
    else:
        monkeypatch.setenv("SHARDPREP_TEST_DELAYS", spec)
    seconds = _seconds(point)
    assert seconds >= 0.3 if slept else seconds < 0.1
