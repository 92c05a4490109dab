"""Per-worker state stays bounded: the pure planning and commit code at 1,000,000 work units and
100,000 shards (synthetic facts, no data). The counts side input itself: test_counts.py."""
from __future__ import annotations

import pytest

from benchmarks import scale_on_paper
from shardprep import config, naming, planning
from shardprep.graph.elements import BatchCount
from shardprep.graph.stages import plan_splits


def test_plan_splits_gives_each_split_its_shard_count_permutation_and_fact():
    cfg = config.ReshardConfig(output="memory://x", run_id=naming.new_run_id(), features={"x": {"dtype": "int64"}},
                               sources=(("a", 1),), splits=planning.parse_splits("train=0.9,eval=0.1"), num_shards=2)
    counts = [BatchCount(0, (0, 0), 0, 7, 70), BatchCount(0, (0, 1), 0, 5, 50), BatchCount(1, (0, 0), 0, 3, 30)]
    plans = plan_splits(cfg, counts)
    assert [p.fact for p in plans.values()] == [(0, 12, 120, 2), (1, 3, 30, 2)]
    assert plans[0].counts.first_position(0, (0, 1), 0) == 7 and plans[1].counts.first_position(1, (0, 0), 0) == 0
    assert plans[0].permutation.n == 12 and plans[1].permutation.n == 3


@pytest.mark.slow
@pytest.mark.parametrize("part", ["plan", "commit"])
def test_a_million_units_and_100k_shards_plan_and_commit_in_bounded_time_and_memory(part):
    """A guard against super-linear growth; the goals (5 s, 500 MB) are measured side by side in
    ``benchmarks.scale_on_paper`` (BENCHMARKS.md, "Scale on paper"), not timed here on a shared CI box."""
    row = scale_on_paper.measure(part, units=1_000_000, shards=100_000)
    assert row["seconds"] < 30.0, row  # quadratic work in 1M units would take hours
    assert row["peak_mb"] < 600, row
