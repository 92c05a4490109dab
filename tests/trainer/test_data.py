"""Pre-flight checks, staging, and the per-worker tf.data input, read back from real TFRecord files."""
from __future__ import annotations

import os

import fsspec
import numpy as np
import pytest
import tensorflow as tf

from benchmarks.naive_trainer import naive_shards, naive_steps_per_epoch
from shardprep import manifest
from shardprep.schema import FeatureSpec
from tests import trainer_fixtures as fx
from trainer import data
from trainer.preflight import DataSetError, InputPlan, plan_input
from trainer.staging import stage_shards

FEATURES = {
    "id": FeatureSpec("int64"),
    "x": FeatureSpec("float32", (2,)),
    "tags": FeatureSpec("int64", (-1,)),
    "label": FeatureSpec("int64"),
}
INPUTS = ("id", "x", "tags")


def _rows(n: int) -> list[dict]:
    return [{"id": i, "x": [float(i), -float(i)], "tags": list(range(i % 3)), "label": i % 2} for i in range(n)]


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> dict[int, str]:
    """Balanced data sets of 7 shards (gzip) and 12 shards (plain)."""
    out = {}
    for shards, records, gzip in ((7, 500, True), (12, 1001, False)):
        root = str(tmp_path_factory.mktemp(f"ds{shards}"))
        fx.write_dataset(root, {"train": fx.deal(_rows(records), shards)}, features=FEATURES, gzip=gzip)
        out[shards] = root
    return out


def _plan(root: str, workers: int, batch: int, **kw) -> InputPlan:
    return plan_input(root=root, split="train", label="label", inputs=INPUTS, num_workers=workers, per_worker_batch=batch, **kw)


def _batches(plan: InputPlan, worker: int, count: int, **kw) -> list[list[int]]:
    """The first ``count`` batches of ``worker``'s stream, pulled as one element, checked against
    the record they were parsed from."""
    ds = data.worker_batches(plan, worker=worker, batch_size=plan.per_worker_batch,
                             batches_per_epoch=plan.steps_per_epoch, **kw)
    features, label = next(iter(ds.take(count).batch(count)))
    ids = features["id"].numpy()
    np.testing.assert_array_equal(features["x"].numpy()[..., 0], ids.astype(np.float32))
    np.testing.assert_array_equal(label.numpy(), ids % 2)
    assert [[len(t) for t in b] for b in features["tags"].to_list()] == (ids % 3).tolist()
    return ids.tolist()


@pytest.mark.parametrize(
    "shards, workers",
    [(7, w) for w in range(1, 17)] + [(12, w) for w in (4, 5, 8)],
)
def test_every_worker_same_full_steps_each_record_at_most_once(datasets: dict[int, str], shards: int, workers: int) -> None:
    batch = 8
    plan = _plan(datasets[shards], workers, batch)
    assert plan.mode == ("file" if shards % workers == 0 else "range")
    seen: list[int] = []
    for w in range(workers):
        batches = _batches(plan, w, plan.steps_per_epoch)
        assert len(batches) == plan.steps_per_epoch and all(len(b) == batch for b in batches)
        seen += [i for b in batches for i in b]
    assert len(seen) == len(set(seen)) == plan.steps_per_epoch * plan.global_batch
    assert plan.num_records - len(seen) == plan.dropped_records < plan.global_batch + workers


@pytest.mark.parametrize("global_seed", [None, 0, 7])
def test_resume_position_replays_the_epoch_tail(datasets: dict[int, str], global_seed: int | None) -> None:
    """Whatever global seed the user's model sets (0 once broke the per-epoch shuffle)."""
    tf.random.set_seed(global_seed)
    try:
        _check_resume(datasets)
    finally:
        tf.random.set_seed(None)


def _check_resume(datasets: dict[int, str]) -> None:
    plan = _plan(datasets[12], 3, 8)
    spe = plan.steps_per_epoch
    mine = {i for p in plan.pieces(1) for i in range(p.shard, 1001, 12)[p.skip: p.skip + p.take]}
    full = _batches(plan, 1, 2 * spe, shuffle_buffer=64, seed=5)
    epoch0, epoch1 = full[:spe], full[spe:]
    for epoch in (epoch0, epoch1):
        ids = [i for batch in epoch for i in batch]
        assert len(ids) == len(set(ids)) and set(ids) <= mine
    assert epoch0 != epoch1  # reshuffled every epoch
    assert _batches(plan, 1, 2 * spe, shuffle_buffer=64, seed=5) == full  # deterministic
    resumed = _batches(plan, 1, spe - 3, shuffle_buffer=64, seed=5, start_epoch=1, skip_batches=3)
    assert resumed == epoch1[3:]  # the rest of the epoch: nothing seen twice
    nxt = _batches(plan, 1, spe + 1, shuffle_buffer=64, seed=5, start_epoch=1, skip_batches=spe - 1)
    assert nxt[0] == epoch1[-1] and nxt[1:] != epoch1  # then the next epoch, from its start


def test_steps_cap_and_naive_shards(datasets: dict[int, str]) -> None:
    plan = _plan(datasets[7], 2, 4, steps_cap=5)
    assert (plan.steps_per_epoch, plan.full_steps_per_epoch) == (5, 62)
    assert _plan(datasets[7], 2, 4, steps_cap=1000).steps_per_epoch == 62
    assert naive_shards(plan, 0) == [0, 2, 4, 6] and naive_shards(plan, 1) == [1, 3, 5]
    assert naive_steps_per_epoch(plan, local_replicas=1) == -(-(72 + 72 + 71 + 71) // 4)


def test_preflight_refusals(tmp_path, datasets: dict[int, str]) -> None:
    root = datasets[7]
    with pytest.raises(manifest.ManifestError, match="no manifest"):
        _plan(str(tmp_path / "nothing"), 2, 4)
    with pytest.raises(DataSetError, match=r"--label 'y' is not a feature .*features: id, label, tags, x"):
        plan_input(root=root, split="train", label="y", inputs=INPUTS, num_workers=2, per_worker_batch=4)
    with pytest.raises(DataSetError, match=r"--label 'x' is float32 of shape \[2\]"):
        plan_input(root=root, split="train", label="x", inputs=("id",), num_workers=2, per_worker_batch=4)
    with pytest.raises(DataSetError, match=r"feature\(s\) 'zz' not in the data set"):
        plan_input(root=root, split="train", label="label", inputs=("id", "zz"), num_workers=2, per_worker_batch=4)
    with pytest.raises(DataSetError, match="--split 'eval' is not in the data set"):
        plan_input(root=root, split="eval", label="label", inputs=INPUTS, num_workers=2, per_worker_batch=4)
    with pytest.raises(DataSetError, match=r"the worker with the fewest gets 31, fewer than one per-worker batch of 32 \(global batch 512"):
        _plan(root, 16, 32)


def test_preflight_refuses_missing_or_resized_shards(tmp_path) -> None:
    root = str(tmp_path)
    m = fx.write_dataset(root, {"train": fx.deal(_rows(40), 4)}, features=FEATURES)
    path = os.path.join(root, m.splits["train"].shards[2].path)
    with open(path, "ab") as f:
        f.write(b"x")
    with pytest.raises(DataSetError, match=r"train-00002-of-00004.tfrecord is \d+ bytes, the manifest says \d+"):
        _plan(root, 2, 4)
    os.remove(path)
    with pytest.raises(DataSetError, match="train-00002-of-00004.tfrecord listed in the manifest is missing"):
        _plan(root, 2, 4)


def test_preflight_refuses_unbalanced_manifest(tmp_path) -> None:
    rows = _rows(30)
    fx.write_dataset(str(tmp_path), {"train": [rows[:20], rows[20:]]}, features=FEATURES)
    with pytest.raises(DataSetError, match="unbalanced: shards hold 10 to 20 records"):
        _plan(str(tmp_path), 2, 4)


def test_stage_from_fsspec_url_verifies_checksums(tmp_path) -> None:
    local = tmp_path / "src"
    fx.write_dataset(str(local), {"train": fx.deal(_rows(60), 3)}, features=FEATURES)
    memfs = fsspec.filesystem("memory")
    memfs.put(str(local), "/stage-src", recursive=True)
    url = "memory://stage-src"
    plan = _plan(url, 3, 4)
    worker = 1
    staged = stage_shards(plan, shards=[p.shard for p in plan.pieces(worker)], stage_dir=str(tmp_path / "stage"))
    assert staged.shard_urls[1].startswith(str(tmp_path / "stage")) and staged.shard_urls[0].startswith("memory://")
    ids = [i for b in _batches(staged, worker, staged.steps_per_epoch) for i in b]
    assert len(ids) == staged.steps_per_epoch * 4
    again = stage_shards(plan, shards=[1], stage_dir=str(tmp_path / "stage"))  # already there: reused
    assert again.shard_urls == staged.shard_urls
    # Same size, different bytes: only the checksum can tell.
    shard_path = "/stage-src/" + plan.shards[0].path
    body = bytearray(memfs.cat_file(shard_path))
    body[-1] ^= 0xFF
    memfs.pipe_file(shard_path, bytes(body))
    with pytest.raises(DataSetError, match="CRC32C .* the shard is corrupt"):
        stage_shards(plan, shards=[0], stage_dir=str(tmp_path / "stage"))
    assert sorted(os.listdir(tmp_path / "stage" / "train")) == ["train-00001-of-00003.tfrecord"]  # no half copy left
    memfs.rm("/stage-src", recursive=True)


def test_parse_spec_matches_manifest_shapes() -> None:
    spec = data.parse_spec(FEATURES)
    assert spec["x"] == tf.io.FixedLenFeature([2], tf.float32)
    assert isinstance(spec["tags"], tf.io.RaggedFeature)
    assert spec["id"] == tf.io.FixedLenFeature([], tf.int64)


@pytest.mark.parametrize("shards, workers", [(7, 3), (12, 5), (12, 4)])
def test_eval_batches_score_every_record_once(datasets: dict[int, str], shards: int, workers: int) -> None:
    plan = _plan(datasets[shards], workers, 1)
    seen = []
    for w in range(workers):
        batches = [(f["id"].numpy().tolist(), label.numpy().tolist()) for f, label in data.eval_batches(plan, worker=w, batch_size=32)]
        assert all(labels == [i % 2 for i in ids] for ids, labels in batches)
        seen += [i for ids, _ in batches for i in ids]
    assert sorted(seen) == list(range(plan.num_records))  # the tail too: nothing dropped


def test_record_ids_are_stable_hashes_of_the_records(datasets: dict[int, str]) -> None:
    plan = _plan(datasets[12], 2, 8)
    ds = data.worker_batches(plan, worker=1, batch_size=8, batches_per_epoch=plan.steps_per_epoch, with_ids=True)
    features, _, ids = next(iter(ds))
    assert ids.dtype == tf.int64 and len(set(ids.numpy().tolist())) == 8
    raw = next(iter(data.worker_records(plan, 1).batch(8)))
    np.testing.assert_array_equal(ids.numpy(), data.record_ids(raw).numpy())
    np.testing.assert_array_equal(features["id"].numpy(), tf.io.parse_example(raw, {"id": tf.io.FixedLenFeature([], tf.int64)})["id"].numpy())


def test_parallel_reads_of_remote_shards_give_the_same_records(datasets: dict[int, str]) -> None:
    plan = _plan(datasets[7], 3, 8)  # range mode: 3 pieces a worker
    for w in range(3):
        read = [[r.numpy() for r in data.worker_records(plan, w, parallel=p)] for p in (False, True, True)]
        assert sorted(read[0]) == sorted(read[1]) and len(read[0]) == plan.worker_plan.records(w)
        assert read[1] == read[2]  # deterministic: a resumed job replays the same order
