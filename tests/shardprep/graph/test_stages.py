"""Shard pieces name batches, not records (``graph.elements``): Assign emits one piece per shard in
place (the listing of the split's batches) and a piece per shard a reordered batch reaches, and WriteShards finds each shard's records from the plan by the permutation's inverse,
in place or from the reordered spill, exactly as ``planning.shard_of`` deals the positions."""
from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardprep import framing, naming, planning
from shardprep.config import ReshardConfig
from shardprep.graph import spill
from shardprep.graph.elements import FACTS, ShardBatches, ShardPiece, SpilledBatch, Tagged
from shardprep.graph.spill import count
from shardprep.graph.stages import Assign, WriteShards
from shardprep.permutation import Permutation
from tests.shardprep.graph.stage_fixtures import spill_config, spilled_batches


def _run(cfg: ReshardConfig, batches: list[SpilledBatch], order: list[int]) -> dict[int, list[bytes]]:
    """Assign over the batches (in ``order``), the pieces grouped by shard (each group reversed, as a
    runner may give them), WriteShards per shard; the shards' records."""
    counts = [count(b) for b in batches]
    assign, groups = Assign(cfg), {}
    for i in order:
        for out in assign.process(batches[i], counts):
            if not isinstance(out, Tagged):
                groups.setdefault(out[0], []).append(out[1])
            else:
                assert out.tag == FACTS
    write = WriteShards(cfg)
    facts = {key: write.process((key, pieces[::-1])) for key, pieces in groups.items()}
    facts = {key: list(fact) for key, fact in facts.items()}  # each shard built; the last maybe still being stored
    write.flush()  # stores the last shard
    shards = {}
    for key, (fact,) in facts.items():
        path = naming.shard_path(cfg.run_id, "train", key[1], key[2], gzip=False)
        with open(f"{cfg.output}/{path}", "rb") as f:
            shards[key[1]] = list(framing.read_records(f))
        assert fact.info.num_records == len(shards[key[1]])
    return shards


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=st.lists(st.integers(1, 60), min_size=1, max_size=6), num_shards=st.integers(1, 9),
       shuffle=st.booleans(), in_place=st.booleans(), data=st.data())
def test_write_shard_finds_every_record_where_the_plan_deals_it(tmp_path_factory, sizes, num_shards, shuffle, in_place,
                                                                data):
    total = sum(sizes)
    num_shards = min(num_shards, total)
    cfg = spill_config(tmp_path_factory.mktemp("p"), num_shards=num_shards, shuffle=shuffle, in_place=in_place)
    batches, records = spilled_batches(cfg, sizes)
    order = data.draw(st.permutations(range(len(sizes))))
    shards = _run(cfg, batches, list(order))
    index = np.arange(total, dtype=np.uint64)
    position = Permutation(total, cfg.seed)(index) if shuffle else index
    shard, place = planning.shard_of(position, np.uint64(num_shards))
    expected: dict[int, list[bytes]] = {}
    for i in np.lexsort((place, shard)).tolist():
        expected.setdefault(int(shard[i]), []).append(records[i][12:-4])
    assert shards == expected
    if not in_place:  # the parsed files are cut down to their ends, the reordered ones hold the records once
        assert all(spill.fs.size(b.url) == b.num_records * np.dtype(spill.ends_dtype(b.size)).itemsize for b in batches)


@pytest.mark.parametrize("in_place, kind", [(True, ShardBatches), (False, ShardPiece)])
def test_pieces_carry_no_per_record_data(tmp_path, in_place, kind):
    """What crosses the runner is the same few numbers for a batch of 10 records or of 10,000."""
    sizes = []
    for folder, n in (("a", 10), ("b", 10_000)):
        cfg = spill_config(tmp_path / folder, num_shards=4, shuffle=True, in_place=in_place)
        (batch,), _ = spilled_batches(cfg, [n])
        pieces = [out[1] for out in Assign(cfg).process(batch, [count(batch)]) if not isinstance(out, Tagged)]
        assert len(pieces) == 4 and all(isinstance(p, kind) for p in pieces)
        sizes.append((len(pickle.dumps(batch)), len(pickle.dumps(pieces))))
    assert abs(sizes[0][0] - sizes[1][0]) <= 8 and abs(sizes[0][1] - sizes[1][1]) <= 32, sizes  # int widths


@pytest.mark.parametrize("num_batches, num_shards", [(6, 4), (3, 8), (1, 5), (5, 5)])
def test_in_place_each_shard_gets_one_piece_whatever_the_batches(tmp_path, num_batches, num_shards):
    """In place, Assign's elements are one per shard in all (not one per batch and shard): the
    shard's piece names the listing of its split's batches, which the first batch writes."""
    cfg = spill_config(tmp_path, num_shards=num_shards, shuffle=True, in_place=True)
    batches, _ = spilled_batches(cfg, [7] * num_batches)
    counts = [count(b) for b in batches]
    assign, keys = Assign(cfg), []
    for batch in reversed(batches):  # the first batch last: the listing is written whenever it comes
        keys += [out[0] for out in assign.process(batch, counts) if not isinstance(out, Tagged)]
    assert sorted(keys) == [(0, shard, num_shards) for shard in range(num_shards)]
    listed = spill.read_listing(cfg, 0, spill.listing_url(cfg, 0), 7 * num_batches)
    assert [(p.url, p.first, p.num_records, p.end) for p in listed] == [
        (b.url, 7 * i, 7, b.size) for i, b in enumerate(batches)]


def test_a_missing_piece_fails_the_shard(tmp_path):
    cfg = spill_config(tmp_path, num_shards=2, shuffle=True, in_place=False)  # a piece per batch and shard
    batches, _ = spilled_batches(cfg, [5, 5])
    counts = [count(b) for b in batches]
    assign = Assign(cfg)
    pieces = [out for out in assign.process(batches[0], counts) if not isinstance(out, Tagged)]
    with pytest.raises(RuntimeError, match="sent no piece"):
        list(WriteShards(cfg).process((pieces[0][0], [pieces[0][1]])))
