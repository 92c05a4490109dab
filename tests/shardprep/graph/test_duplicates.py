"""``--dedup exact`` in the stages (``graph.duplicates``): Assign with duplicates dropped writes the very
shards Assign writes over the records with their repeats removed (lowest input position kept), in
place or not, in any order of batches; the dead letters name each dropped record's place in its
file and the record kept; an earlier generation's hashes win."""
from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardprep import framing, naming, record_hashes
from shardprep.config import ReshardConfig
from shardprep.graph import spill
from shardprep.graph.duplicates import Duplicates, UnitHashes, hashes_url
from shardprep.graph.elements import FACTS, DuplicateFact, HashesFact, SpilledBatch, Tagged
from shardprep.graph.spill import count
from shardprep.graph.stages import Assign, WriteShards

RUN = "run-20261207T000000Z-0000abcd"


def _config(root, *, dedup: bool, in_place: bool = True, against: tuple = ()) -> ReshardConfig:
    return ReshardConfig(output=str(root), run_id=RUN, features={"x": {"dtype": "int64", "shape": []}}, sources=(),
                         num_shards=3, seed=7, spill_in_place=in_place, dedup="exact" if dedup else "none",
                         dedup_against=against)


def _unit(file: int, index: int, first_position: int = 0) -> SimpleNamespace:
    return SimpleNamespace(file=SimpleNamespace(index=file, url=f"in-{file}.csv"), index=index,
                           first_position=first_position)


def _spill(cfg: ReshardConfig, units: list[list[bytes]], *, hashed: bool) -> list[SpilledBatch]:
    """Each unit's records (Examples) as one batch of split 0, spilled as Parse does (with their hashes)."""
    batches = []
    for u, records in enumerate(units):
        block = spill.joined([framing.frame(r) for r in records])
        batches.append(spill.pack(cfg, 0, (0, u), 0, [block]))
        if hashed:
            hashes = UnitHashes("")
            hashes.member(_unit(0, u), 0)
            hashes.batch(0, 0, [hashes.mark(block)])
            hashes.write(hashes_url(cfg, (0, u)))
    return batches


def _shards(cfg: ReshardConfig, batches: list[SpilledBatch], order: list[int]) -> tuple[dict, list]:
    counts = [count(b) for b in batches]
    assign, groups, facts = Assign(cfg), {}, []
    for i in order:
        for out in assign.process(batches[i], counts):
            if isinstance(out, Tagged):
                assert out.tag == FACTS
                facts.append(out.value)
            else:
                groups.setdefault(out[0], []).append(out[1])
    write = WriteShards(cfg)
    written = {key: list(write.process((key, pieces))) for key, pieces in groups.items()}
    write.flush()
    out = {}
    for key, _ in written.items():
        with open(f"{cfg.output}/{naming.shard_path(cfg.run_id, 'train', key[1], key[2], gzip=False)}", "rb") as f:
            out[key[1]] = list(framing.read_records(f))
    return out, facts


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(units=st.lists(st.lists(st.integers(0, 12), min_size=1, max_size=25), min_size=1, max_size=4),
       in_place=st.booleans(), data=st.data())
def test_dropping_duplicates_writes_the_shards_of_the_records_without_them(tmp_path_factory, units, in_place, data):
    records = [[b"v%d" % v for v in unit] for unit in units]
    seen: set[bytes] = set()
    firsts = []
    for unit in records:  # the lowest input position of each value is kept
        firsts.append([r for r in unit if not (r in seen or seen.add(r))])
    order = list(data.draw(st.permutations(range(len(units)))))
    cfg = _config(tmp_path_factory.mktemp("d"), dedup=True, in_place=in_place)
    shards, facts = _shards(cfg, _spill(cfg, records, hashed=True), order)
    plain = _config(tmp_path_factory.mktemp("p"), dedup=False, in_place=in_place)
    expected, _ = _shards(plain, _spill(plain, [u for u in firsts if u], hashed=False),
                          list(range(len([u for u in firsts if u]))))
    assert shards == expected
    dropped = [f for f in facts if isinstance(f, DuplicateFact)]
    assert sum(f.count for f in dropped) == sum(map(len, records)) - len(seen)
    (stored,) = [f.info for f in facts if isinstance(f, HashesFact)]
    assert stored.num_records == len(seen)


def test_a_dead_letter_names_its_place_in_its_file_and_the_record_kept(tmp_path):
    """Position: the record's index among its file's records that parse, across the file's units."""
    cfg = _config(tmp_path, dedup=True)
    batches = []
    for u, records in enumerate(([b"a", b"b"], [b"c", b"a", b"b"])):  # two units of file 0: "a" again at 3
        hashes = UnitHashes("")
        hashes.member(_unit(0, u), 0)
        block = spill.joined([framing.frame(r) for r in records])
        batches.append(spill.pack(cfg, 0, (0, u), 0, [block]))
        hashes.batch(0, 0, [hashes.mark(block)])
        hashes.write(hashes_url(cfg, (0, u)))
    duplicates = Duplicates(cfg, [count(b) for b in batches])
    assert duplicates.drop(batches[0]) == (batches[0], [])
    kept, facts = duplicates.drop(batches[1])
    assert (kept.num_records, kept.size) == (1, len(framing.frame(b"c")))
    lines = [json.loads(x) for x in open(f"{cfg.output}/{facts[0].path}")]
    assert [(x["source"], x["position"], x["unit"], x["reason"]) for x in lines] == [
        ("in-0.csv", 3, "0:1", "duplicate"), ("in-0.csv", 4, "0:1", "duplicate")]
    assert "as record 0 of in-0.csv, kept" in lines[0]["detail"] and lines[0]["raw"] == "a"
    assert list(spill.read_ends(kept)) == [17]  # the spill file rewritten without them
    assert duplicates.drop(batches[1])[0] == kept  # a retried Assign finds it rewritten and keeps it


def test_a_record_an_earlier_generation_holds_is_dropped_there_first(tmp_path):
    old = record_hashes.write(str(tmp_path), "run-20261206T000000Z-00000001", record_hashes.sorted_unique(
        record_hashes.of_framed(framing.frame(b"b"), np.array([len(framing.frame(b"b"))], np.uint64))), "")
    cfg = _config(tmp_path, dedup=True, against=(old,))
    (batch,) = _spill(cfg, [[b"a", b"b", b"b"]], hashed=True)
    duplicates = Duplicates(cfg, [count(batch)])
    kept, facts = duplicates.drop(batch)
    assert kept.num_records == 1 and facts[1].count == 2
    lines = [json.loads(x) for x in open(f"{cfg.output}/{facts[0].path}")]
    assert [x["position"] for x in lines] == [1, 2]
    assert all("already in the data set (generation 1" in x["detail"] for x in lines)
    assert record_hashes.contains(duplicates.kept_hashes(), record_hashes.of_framed(
        framing.frame(b"a"), np.array([len(framing.frame(b"a"))], np.uint64))).all()


def test_the_decision_is_made_once_and_another_process_reads_it_without_the_units(tmp_path):
    cfg = _config(tmp_path, dedup=True)
    batches = _spill(cfg, [[b"a", b"b"], [b"c", b"a", b"b", b"d"]], hashed=True)
    counts = [count(b) for b in batches]
    first = Duplicates(cfg, counts)
    for u in range(len(batches)):  # the units' rows gone: a process that drops nothing never reads them
        (tmp_path / naming.spill_path(RUN, "hashes", file=0, unit=u)).unlink()
    other = Duplicates(cfg, counts)
    assert (other.count, other.counts(counts), other.store()) == (2, first.counts(counts), first.store())
    assert other.drop(batches[0]) == (batches[0], [])
    assert (other.kept_hashes() == first.kept_hashes()).all() and len(first.kept_hashes()) == 4
