"""Pure planning: splits, shard counts, balance (shards dealt from permuted positions), worker plans.
The permutation itself: test_permutation.py."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardprep import planning
from shardprep.permutation import Permutation


@pytest.mark.parametrize(
    "text, expected",
    [
        ("train", (("train", 1.0),)),
        ("train=0.9,eval=0.1", (("train", 0.9), ("eval", 0.1))),
        ("a=0.5,b=0.25,c=0.25", (("a", 0.5), ("b", 0.25), ("c", 0.25))),
    ],
)
def test_parse_splits(text, expected):
    assert tuple((s.name, s.fraction) for s in planning.parse_splits(text)) == expected


@pytest.mark.parametrize(
    "text, message",
    [
        ("train=0.9,eval=0.2", "add up to 1.1"),
        ("train=0.9,train=0.1", "twice"),
        ("train=x,eval=0.1", "is not NAME=FRACTION"),
        ("Train=1", "not valid"),
        ("train=0,eval=1", "fraction 0"),
        ("rejected=1", "not valid"),
    ],
)
def test_parse_splits_refuses(text, message):
    with pytest.raises(ValueError, match=message):
        planning.parse_splits(text)


def test_split_index_is_stable_and_follows_fractions():
    splits = planning.parse_splits("train=0.8,eval=0.2")
    bounds = planning.split_thresholds(splits)
    picks = [planning.split_index(f"record {i}".encode(), 7, bounds) for i in range(20000)]
    assert picks == [planning.split_index(f"record {i}".encode(), 7, bounds) for i in range(20000)]
    assert 0.78 < picks.count(0) / len(picks) < 0.82
    other_seed = [planning.split_index(f"record {i}".encode(), 8, bounds) for i in range(20000)]
    assert picks != other_seed


@pytest.mark.parametrize(
    "num_shards, workers, message",
    [(10, 4, "use --num-shards 8 or 12"), (3, 4, "use --num-shards 4"), (7, 2, "use --num-shards 6 or 8")],
)
def test_check_num_shards_names_the_nearest_valid(num_shards, workers, message):
    with pytest.raises(planning.PlanError, match=message):
        planning.check_num_shards(num_shards, workers)


@pytest.mark.parametrize(
    "kwargs, expected",
    [
        (dict(num_records=1000, num_bytes=10**6, num_shards=16), 16),
        (dict(num_records=1000, num_bytes=10**6, num_shards=16, workers=4), 16),
        (dict(num_records=1000, num_bytes=10**6, workers=4), 4),  # small data: one shard per worker
        (dict(num_records=10**6, num_bytes=10 * 2**30, workers=4), 80),  # 10 GiB / 128 MiB, rounded up to 4x
        (dict(num_records=10**6, num_bytes=10 * 2**30, workers=3), 81),
        (dict(num_records=1000, num_bytes=10**6, workers=4, shards_per_worker=8), 32),
        (dict(num_records=10, num_bytes=10 * 2**30, workers=4), 8),  # never more shards than records allow
    ],
)
def test_choose_num_shards(kwargs, expected):
    assert planning.choose_num_shards(**kwargs) == expected


def test_choose_num_shards_refuses_empty_shards():
    with pytest.raises(planning.PlanError, match="split 'eval' has 3 records, fewer than its 4 shards"):
        planning.choose_num_shards(num_records=3, num_bytes=100, workers=4, split="eval")


@given(st.integers(0, 5000), st.integers(1, 300))
def test_shard_sizes_are_floor_or_ceil(n, num_shards):
    sizes = planning.shard_sizes(n, num_shards)
    assert sum(sizes) == n and max(sizes) - min(sizes) <= 1


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 3000), st.integers(1, 64), st.integers(0, 2**32))
def test_dealing_permuted_positions_balances_every_shard(n, num_shards, seed):
    positions = Permutation(n, seed)(np.arange(n))
    shards, _ = planning.shard_of(positions, np.uint64(num_shards))  # the pipeline's form of the rule
    counts = np.bincount(shards.astype(np.int64), minlength=num_shards)
    assert counts.tolist() == planning.shard_sizes(n, num_shards)


def test_shard_of_deals_round_robin_alike_for_ints_and_arrays():
    positions = np.arange(23, dtype=np.uint64)
    shards, orders = planning.shard_of(positions, np.uint64(5))
    assert [planning.shard_of(p, 5) for p in range(23)] == list(zip(shards.tolist(), orders.tolist()))
    assert planning.shard_of(12, 5) == (2, 2)


@pytest.mark.parametrize(
    "shard_records, workers",
    [(records, w) for records in ([5] * 8, [7, 7, 6, 6, 6], [100] * 12 + [99] * 4, [3], [40])
     for w in range(1, 17) if w <= sum(records)],
)
def test_plan_workers_equal_steps_and_disjoint(shard_records, workers):
    plan = planning.plan_workers(shard_records, workers)
    assert plan.mode == ("file" if len(shard_records) % workers == 0 else "range")
    seen = set()
    for w in range(workers):
        for piece in plan.pieces[w]:
            assert 0 <= piece.skip and piece.skip + piece.take <= shard_records[piece.shard]
            ids = {(piece.shard, i) for i in range(piece.skip, piece.skip + piece.take)}
            assert not ids & seen
            seen |= ids
    totals = [plan.records(w) for w in range(workers)]
    if plan.mode == "range":
        assert len(seen) == sum(shard_records) and max(totals) - min(totals) <= 1
    steps = plan.steps_per_epoch(2)
    assert all(t // 2 >= steps for t in totals)


def test_valid_worker_counts():
    assert planning.valid_worker_counts(12) == [1, 2, 3, 4, 6, 12]
