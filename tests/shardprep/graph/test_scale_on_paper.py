"""Per-worker state stays bounded: the counts side input as a sorted array with prefix sums, and the
pure planning and commit code at 1,000,000 work units and 100,000 shards (synthetic facts, no data)."""
from __future__ import annotations

import random

import pytest

from benchmarks import scale_on_paper
from shardprep import config, naming, planning
from shardprep.graph.counts import CountTable
from shardprep.graph.elements import BatchCount
from shardprep.graph.stages import plan_splits


def _naive_offsets(counts: list[BatchCount]) -> dict[tuple, int]:
    """The former plan: a dict of tuples, sorted per split, prefix sums in Python."""
    by_key = {(c.split, tuple(c.unit), c.part): c.num_records for c in counts}
    out, totals = {}, {}
    for key in sorted(by_key):
        out[key] = totals.get(key[0], 0)
        totals[key[0]] = out[key] + by_key[key]
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_first_positions_equal_the_prefix_sums_in_key_order(seed):
    rng = random.Random(seed)
    counts = [BatchCount(rng.randrange(3), (f, u), p, rng.randrange(0, 50), rng.randrange(1, 10**6))
              for f in range(rng.randrange(1, 40)) for u in range(rng.randrange(1, 5)) for p in range(rng.randrange(1, 3))]
    shuffled = counts + rng.sample(counts, len(counts) // 3)  # runners may deliver an element twice
    rng.shuffle(shuffled)
    table = CountTable(shuffled)
    assert len(table) == len(counts)
    for key, first in _naive_offsets(counts).items():
        assert table.first_position(*key) == first, key
    for s in table.splits():
        assert table.totals(s) == (sum(c.num_records for c in counts if c.split == s),
                                   sum(c.size for c in counts if c.split == s))


def test_conflicting_counts_and_unknown_batches_are_refused():
    a = BatchCount(0, (3, 1), 0, 10, 100)
    with pytest.raises(RuntimeError, match=r"two different counts for batch \[0, 3, 1, 0\]"):
        CountTable([a, a._replace(num_records=11)])
    table = CountTable([a])
    for key in [(0, (3, 1), 1), (0, (3, 2), 0), (1, (3, 1), 0), (0, (2**40, 1), 0)]:
        with pytest.raises(KeyError, match="not in the counts side input"):
            table.first_position(*key)
    assert len(CountTable([])) == 0 and CountTable([]).splits() == []


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
