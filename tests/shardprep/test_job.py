"""``job``: the re-shard defined once. Each stage comes after every stage it reads, the statistics
stage only where statistics are asked for, and a group's values come in one order whatever order
they arrive in (the engines' pool runs are ``tests/pipelines/test_pool.py``'s)."""
from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardprep.config import ReshardConfig
from shardprep.job import BY_KEY, ONE_GROUP, Stage, group_values, groups, planned_job, reshard_job


def _config(tmp_path, **changes) -> ReshardConfig:
    return ReshardConfig(output=str(tmp_path / "out"), run_id="run-test", features={"x": {"dtype": "int64", "shape": []}},
                         sources=(), num_shards=2, seed=7, **changes)


def _reads(stage: Stage) -> set[str]:
    """The stages whose outputs ``stage`` takes (its own input and its side inputs)."""
    return {source.split(".")[0] for source in (*stage.over, *stage.side) if source}


@pytest.mark.parametrize("statistics, in_parse", [(False, True), (True, True), (True, False)])
def test_each_stage_comes_after_every_stage_it_reads(tmp_path, statistics, in_parse):
    job = reshard_job(_config(tmp_path, statistics=statistics, statistics_in_parse=in_parse), num_units=5)
    names = [stage.name for stage in job.stages]
    assert len(set(names)) == len(names)
    for i, stage in enumerate(job.stages):
        assert _reads(stage) <= set(names[:i]), stage.name
    assert names[-1] == job.result == "Commit" and job.stages[-1].group == ONE_GROUP
    assert job.num_units == 5 and job.inputs and job.staged
    stats = [stage for stage in job.stages if stage.name == "Stats"]
    assert len(stats) == statistics
    if statistics:
        assert stats[0].group == BY_KEY and stats[0].over == (("Parse" if in_parse else "WriteShards") + ".stats",)
        assert "Stats" in job.stages[-1].over


def test_a_planned_job_runs_its_first_stages_then_the_reshard_over_the_last_ones_units(tmp_path):
    first = (Stage("Plan", None, over=("",), heavy=True), Stage("StageUnits", None, over=("Plan",)))
    job = planned_job(_config(tmp_path), first, ["a", "b"])
    assert job.stages[:2] == first and job.inputs == ("a", "b") and job.num_units is None
    assert job.stages[2].name == "ExpandUnits" and job.stages[2].over == ("StageUnits",)
    names = [stage.name for stage in job.stages]
    for i, stage in enumerate(job.stages):
        assert _reads(stage) <= set(names[:i]), stage.name


@settings(max_examples=100, deadline=None)
@given(pairs=st.lists(st.tuples(st.integers(0, 4), st.one_of(st.integers(), st.text(max_size=5))), max_size=40),
       seed=st.integers(0, 2**32 - 1))
def test_groups_are_the_same_whatever_order_the_values_arrive_in(pairs, seed):
    shuffled = list(pairs)
    random.Random(seed).shuffle(shuffled)
    assert groups(pairs) == groups(shuffled)
    keys = [key for key, _ in groups(pairs)]
    assert sorted(keys) == sorted(set(key for key, _ in pairs))
    for key, values in groups(pairs):
        assert values == group_values(value for k, value in shuffled if k == key)
        assert sorted(map(repr, values)) == sorted(repr(value) for k, value in pairs if k == key)
