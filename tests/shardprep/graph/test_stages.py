"""Shard pieces name batches, not records (``graph.elements``): Assign emits one piece per shard in
place (the listing of the split's batches) and a piece per shard a reordered batch reaches, and WriteShards finds each shard's records from the plan by the permutation's inverse,
in place or from the reordered spill, exactly as ``planning.shard_of`` deals the positions."""
from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardprep import framing, naming, planning, run
from shardprep.config import ReshardConfig
from shardprep.graph import spill
from shardprep.graph.elements import FACTS, ShardBatches, ShardPiece, SpilledBatch, Tagged
from shardprep.graph.spill import count
from shardprep.graph.stages import Assign, WriteShards
from shardprep.permutation import Permutation
from shardprep.schema import schema_from_json
from shardprep.stats import feature_stats
from tests.shardprep.graph.stage_fixtures import spill_config, spilled_batches

ROOT = Path(__file__).resolve().parents[3]


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


def _bytes_heavy(folder, records: int) -> list[str]:
    """Two TFRecord files of Examples with an id, a float, a label of 3 values and two long bytes
    features, every value distinct: a text of 150-250 and a payload of 100-400 random bytes (issue
    61's bytes-heavy pass-through, small)."""
    from shardprep.example import columnar
    from shardprep.schema import FeatureSpec

    rng = np.random.default_rng(61)
    schema = {"id": FeatureSpec("int64"), "x": FeatureSpec("float32"), "label": FeatureSpec("string"),
              "text": FeatureSpec("string"), "payload": FeatureSpec("string")}
    folder.mkdir()
    paths = []
    for k, n in enumerate((records * 2 // 3, records - records * 2 // 3)):
        labels = [(b"a", b"bb", b"ccc")[i] for i in rng.integers(0, 3, n).tolist()]
        columns = {"id": np.arange(n) + k * records, "x": rng.normal(size=n).astype(np.float32),
                   "label": (np.concatenate(([0], np.cumsum([len(v) for v in labels]))), b"".join(labels))}
        for name, (lo, hi) in {"text": (150, 251), "payload": (100, 401)}.items():
            sizes = rng.integers(lo, hi, n)
            columns[name] = (np.concatenate(([0], np.cumsum(sizes))), rng.integers(0, 256, int(sizes.sum()), np.uint8).tobytes())
        blob, _ = columnar.encode_framed(schema, columns, n)
        path = folder / f"part-{k}.tfrecord"
        path.write_bytes(bytes(blob))
        paths.append(str(path))
    return paths


@pytest.mark.parametrize("cap", [128 << 10, 512 << 10])
def test_bytes_heavy_statistics_do_not_depend_on_the_tasks(tmp_path, monkeypatch, cap):
    """A pass-through whose long bytes features WriteShards counts (issue 61), at a cap that each
    task's partial of the small split stays under and their union passes (128 KiB), or that the
    small split stays under and the large one passes (512 KiB): the manifest's statistics are the
    same in one process and in two (tasks of 4 shards), with 8 or 24 shards, and equal to Python's
    decoder over each split's records read back (``feature_stats.batch_stats``)."""
    monkeypatch.setattr(feature_stats, "MAX_HELD_BYTES", cap)  # the forked workers inherit it
    inputs = [arg for path in _bytes_heavy(tmp_path / "in", 4000) for arg in ("--input", path)]
    got = {}
    for name, flags in {"one": ["--local-workers", "1"], "two": ["--local-workers", "2"],
                        "two-24": ["--local-workers", "2", "--num-shards", "24"]}.items():
        assert run.main([*inputs, "--output", str(tmp_path / name), "--num-shards", "8", *flags, "--seed", "3",
                         "--split", "train=0.8,eval=0.2"]) == 0
        got[name] = json.loads((tmp_path / name / "manifest.json").read_text())["statistics"]
    assert got["one"] == got["two"] == got["two-24"]
    doc = json.loads((tmp_path / "two" / "manifest.json").read_text())
    features = schema_from_json(doc["features"])
    for split, stats in got["two"].items():
        records = []
        for shard in doc["splits"][split]["shards"]:
            with open(tmp_path / "two" / shard["path"], "rb") as f:
                records += list(framing.read_records(f))
        expected = feature_stats.to_json(feature_stats.batch_stats(records, features), features)
        assert json.loads(json.dumps(expected)) == stats, split
    train, held = got["two"]["train"]["text"], {}
    for split in ("train", "eval"):  # every text distinct: the bytes held exact
        held[split] = got["two"][split]["text"]["count"] * got["two"][split]["text"]["bytes_mean"]
    assert train["distinct_estimated"] and held["train"] > cap
    if cap == 128 << 10:  # a task's half of the small split under the cap, the two past it
        assert got["two"]["eval"]["text"]["distinct_estimated"] and held["eval"] / 2 < cap < held["eval"]
    else:
        assert not got["two"]["eval"]["text"]["distinct_estimated"] and held["eval"] < cap


def test_merge_stats_loads_string_counting_before_the_pool_forks():
    """MergeStats, built in the launcher before a local pool forks, imports ``pyarrow.compute``
    where the schema has a string feature (its processes share it), not otherwise."""
    code = """
import sys
from shardprep.config import ReshardConfig
from shardprep.graph.stages import MergeStats
def config(dtype):
    return ReshardConfig(output="out", run_id="run-test", features={"f": {"dtype": dtype, "shape": []}},
                         sources=(), num_shards=1)
MergeStats(config("float32"))
assert "pyarrow.compute" not in sys.modules
MergeStats(config("string"))
assert "pyarrow.compute" in sys.modules
"""
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
