"""``shardprep.manifest_checks``: a committed manifest is sound, and each invariant broken in it (the
accounting, the splits against their shards, balance within a generation, a shard listed twice or
copied into another split) is one readable line naming what is wrong."""
from __future__ import annotations

import dataclasses

import pytest

from shardprep import manifest
from shardprep.manifest_checks import problems
from tests.commit_fixtures import committed, numbered_run_id


@pytest.fixture(scope="module")
def sound(tmp_path_factory) -> manifest.Manifest:
    out = str(tmp_path_factory.mktemp("checks") / "ds")
    assert committed(out, numbered_run_id(1), records=9, num_shards=3).endswith("manifest.json")
    return manifest.load(out)


def _with_split(m: manifest.Manifest, name: str, **changes) -> manifest.Manifest:
    return dataclasses.replace(m, splits={**m.splits, name: dataclasses.replace(m.splits[name], **changes)})


def test_a_committed_manifest_is_sound(sound):
    assert problems(sound) == []
    assert [len(s.shards) for s in sound.splits.values()] == [3, 3]


def test_accounting_that_does_not_add_up_is_named(sound):
    acc = sound.accounting
    broken = dataclasses.replace(sound, accounting=dataclasses.replace(acc, read=acc.read + 1))
    assert problems(broken) == [f"accounting: read {acc.read + 1} != written {acc.written} + rejected {acc.rejected}"]
    more = dataclasses.replace(acc, read=acc.read + 2, written=acc.written + 2)
    assert problems(dataclasses.replace(sound, accounting=more)) == [
        f"accounting: written {acc.written + 2} but the splits hold {acc.written} records"]
    rejected = dataclasses.replace(acc, read=acc.read + 1, rejected=acc.rejected + 1)
    assert problems(dataclasses.replace(sound, accounting=rejected)) == [
        f"accounting: rejected {acc.rejected + 1} but the dead letters hold {sound.rejected.num_records}"]


def test_a_split_whose_shards_do_not_hold_it_is_named(sound):
    train = sound.splits["train"]
    assert problems(_with_split(sound, "train", num_bytes=train.num_bytes + 1)) == [
        "split 'train': shard bytes do not add up to the split's num_bytes"]
    first, *rest = train.shards
    moved = (dataclasses.replace(first, num_records=first.num_records + 2), *rest)
    found = problems(_with_split(sound, "train", shards=moved))
    assert "split 'train' is unbalanced: shards hold 3 to 5 records" in found
    assert f"split 'train': shards hold {train.num_records + 2} records, the split says {train.num_records}" in found
    assert "split 'train' has no shards" in problems(_with_split(sound, "train", shards=()))


def test_each_generation_is_balanced_on_its_own(sound):
    train = sound.splits["train"]
    other = tuple(dataclasses.replace(s, path="run-other/" + s.path.split("/", 1)[1], num_records=s.num_records + 5,
                                      crc32c="0" * 8) for s in train.shards)
    both = _with_split(sound, "train", shards=train.shards + other)
    assert not any("unbalanced" in line for line in problems(both))  # 3 a shard, then 8 a shard: each balanced
    skewed = other[:-1] + (dataclasses.replace(other[-1], num_records=1),)
    assert "split 'train' is unbalanced (generation run-other): shards hold 1 to 8 records" in \
        problems(_with_split(sound, "train", shards=train.shards + skewed))


def test_a_shard_listed_twice_or_copied_into_another_split_is_named(sound):
    train, evaluation = sound.splits["train"], sound.splits["eval"]
    twice = _with_split(sound, "train", shards=train.shards + train.shards[:1])
    assert f"{train.shards[0].path} is listed twice (train[0] and train[3])" in problems(twice)
    copied = dataclasses.replace(train.shards[1], path=evaluation.shards[0].path.replace("eval", "copy"))
    found = problems(_with_split(sound, "eval", shards=(copied, *evaluation.shards[1:])))
    assert f"{copied.path} (eval[0]) has the same crc32c, size and records as {train.shards[1].path} (train[1])" \
        in found
