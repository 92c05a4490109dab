"""``trainer.input``, the public input of a user's own loop: planned TF-free, batches that end, resume state
that refuses another input; and real MWMS worker processes (``input_worker.py``) training through it, a
custom ``strategy.run`` loop and Keras ``fit``, resumed mid-epoch with another worker count, every record
of the epoch trained exactly once (the model logs the ids it trained on)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from shardprep.schema import FeatureSpec
from tests import trainer_fixtures as fx
from tests.trainer import workers as wk

FEATURES = {**{f"x{i}": FeatureSpec("float32") for i in range(4)}, "id": FeatureSpec("int64"), "label": FeatureSpec("int64")}
ROWS, SHARDS, GLOBAL, EPOCHS = 480, 2, 24, 3
SPE = ROWS // GLOBAL  # 20 steps per epoch with 2 workers (12 each) and with 3 (8 each): nothing dropped
PROGRAM = os.path.join(os.path.dirname(__file__), "input_worker.py")


def _rows(n: int) -> list[dict]:
    return [{"x0": float(i % 7), "x1": float(i % 3), "x2": 1.0, "x3": -1.0, "id": i, "label": i % 2} for i in range(n)]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = str(tmp_path_factory.mktemp("ds"))
    fx.write_dataset(root, {"train": fx.deal(_rows(ROWS), SHARDS)}, features=FEATURES)
    return root


def test_open_is_tf_free_and_proves_equal_steps(dataset: str) -> None:
    code = ("import sys, trainer.input as ti; inp = ti.open(sys.argv[1], label='label', global_batch_size=24, "
            "num_workers=3); assert 'tensorflow' not in sys.modules; print(inp.steps_per_epoch, inp.num_workers, "
            "inp.plan.mode, inp.num_classes)")
    out = subprocess.run([sys.executable, "-c", code, dataset], env=fx.worker_env(), cwd=fx.REPO, capture_output=True,
                         text=True, check=True).stdout
    assert out.split() == [str(SPE), "3", "range", "2"]


def test_open_refuses_what_cannot_give_equal_steps(dataset: str) -> None:
    import trainer.input as ti

    with pytest.raises(ti.DataSetError, match="does not divide among 5 workers"):
        ti.open(dataset, label="label", global_batch_size=24, num_workers=5)
    with pytest.raises(ti.DataSetError, match="fewer than one per-worker batch"):
        ti.open(dataset, label="label", global_batch_size=600, num_workers=2)
    with pytest.raises(ti.DataSetError, match="not a feature"):
        ti.open(dataset, label="nope", global_batch_size=24, num_workers=1)


def test_one_worker_epochs_end_and_cover_the_records_once(dataset: str, tmp_path) -> None:
    import tensorflow as tf

    import trainer.input as ti

    inp = ti.open(dataset, label="label", global_batch_size=GLOBAL, seed=3, shuffle=64, epochs=2, num_workers=1)
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    epochs = [[int(i) for features, _ in inp.distribute(strategy, epoch=e) for i in features["id"].numpy()] for e in range(2)]
    assert [len(ids) for ids in epochs] == [ROWS, ROWS] and [sorted(ids) for ids in epochs] == [list(range(ROWS))] * 2
    assert epochs[0] != epochs[1]  # reshuffled every epoch
    rest = [int(i) for features, _ in inp.distribute(strategy, start_step=SPE + 5) for i in features["id"].numpy()]
    assert rest == epochs[1][5 * GLOBAL:]  # a start step within the last epoch: the rest of it, then the end
    path = tf.train.Checkpoint(input=inp.state).save(str(tmp_path / "ck"))
    tf.train.Checkpoint(input=ti.open(dataset, label="label", global_batch_size=GLOBAL, seed=3, shuffle=64,
                                      num_workers=1).state).restore(path)  # the same input resumes
    for changed in ({"seed": 4}, {"global_batch_size": 48}):
        other = ti.open(dataset, label="label", **{"global_batch_size": GLOBAL, "seed": 3, **changed}, shuffle=64,
                        num_workers=1)
        with pytest.raises(ti.ResumeError, match="saved under another input"):
            tf.train.Checkpoint(input=other.state).restore(path)


def _epochs_exact(steps: list[list[list[int]]]) -> None:
    """Every global batch holds GLOBAL ids; every epoch trains on every record exactly once."""
    assert len(steps) == EPOCHS * SPE
    for s, batch in enumerate(steps):
        assert sum(len(ids) for ids in batch) == GLOBAL, f"step {s}"
    for e in range(EPOCHS):
        ids = [i for batch in steps[e * SPE:(e + 1) * SPE] for part in batch for i in part]
        assert sorted(ids) == list(range(ROWS)), f"epoch {e}: a record twice or missing"


@pytest.mark.slow
@pytest.mark.parametrize("mode,before,after", [("custom", 2, 3), ("custom", 3, 2), ("fit", 2, 3), ("fit", 3, 2)])
def test_elastic_resume_mid_epoch_trains_every_record_once(dataset: str, tmp_path, mode: str, before: int,
                                                           after: int) -> None:
    """W workers train 27 steps (7 into epoch 1) and checkpoint; W' others resume to the end."""
    ckpt, env, stop = str(tmp_path / "ckpt"), {"GLOBAL_BATCH": str(GLOBAL), "EPOCHS": str(EPOCHS)}, SPE + 7
    first = wk.run_workers(before, [PROGRAM, mode, dataset, ckpt, str(tmp_path / "run1"), str(stop)], env=env)
    second = wk.run_workers(after, [PROGRAM, mode, dataset, ckpt, str(tmp_path / "run2"), "0"], env=env)
    assert all(f"steps {stop} from 0 to {stop}" in out for out in first), first[0][-2000:]
    assert all(f"steps {EPOCHS * SPE - stop} from {stop} to {EPOCHS * SPE}" in out for out in second), second[0][-2000:]
    steps = wk.step_ids(str(tmp_path / "run1"), before) + wk.step_ids(str(tmp_path / "run2"), after)
    _epochs_exact(steps)
