"""The re-shard's output bytes do not change: every format's shards and dead letters match the
digests committed in ``benchmarks/identity_baseline.json`` (made with the tree before the layout
change; regenerate it only for a change that is meant to alter the bytes)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import identity

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("runner", ["direct", pytest.param("beam", marks=pytest.mark.slow)])
def test_each_format_gives_the_baseline_bytes(runner):
    """On the local engine, and as the Beam graph on Beam's own runner (what Dataflow runs)."""
    baseline = json.loads((ROOT / "benchmarks" / "identity_baseline.json").read_text())
    now = identity.identity(ROOT, extra=("--runner", runner))
    assert set(now) == set(identity.CASES) and all(len(shards) >= 16 for shards in now.values()), now
    assert identity.compare(baseline, now) == []


def test_compare_names_each_difference():
    a = {"csv": {"RUN/train/x": "00000001", "RUN/eval/y": "00000002"}}
    b = {"csv": {"RUN/train/x": "00000003"}}
    assert identity.compare(a, b) == ["csv RUN/eval/y: 00000002 != None", "csv RUN/train/x: 00000001 != 00000003"]
