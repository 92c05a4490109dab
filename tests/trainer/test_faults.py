"""Training faults: a soak of SIGKILLs with relaunches, what the resumed job reads, and resumes the
input plan forbids. One soak (4 launches of 2 real workers) feeds every test of the module."""
from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
from typing import Any

import pytest

from tests import trainer_fixtures as fx
from trainer import train
from trainer.idlog import log_path, read_log
from trainer.metrics import summary_url
from trainer.preflight import plan_input

pytestmark = pytest.mark.slow

LAUNCH = [sys.executable, "-m", "trainer.launch", "--workers", "2", "--restarts", "0", "--"]  # relaunched by hand
WORKERS, BATCH, EPOCHS = 2, 16, 3
CHECKPOINT_EVERY = 5  # no kill step below is a multiple: every kill loses steps that the relaunch redoes
TRAIN_ROWS, EVAL_ROWS = 960, 240  # 3 train shards of 320: range mode, 480 records a worker, none dropped
SPE = TRAIN_ROWS // (WORKERS * BATCH)  # 30 steps per epoch
TOTAL = EPOCHS * SPE  # what an uninterrupted run ends at (the demo test checks one does)
SEED = 11  # kills worker 1 at step 18, worker 0 (the chief) at 48, worker 1 at 69
# One kill in each third of the job, at a step drawn with a fixed seed, of a worker drawn alike.
_rng = random.Random(SEED)
KILLS = [(_rng.randint(lo, hi), _rng.randrange(WORKERS)) for lo, hi in ((4, 24), (34, 54), (64, 84))]


def _args(data: str, model_dir: str, *extra: str) -> list[str]:
    return [
        "--data", data, "--model", "tests.trainer_fixtures:small_model", "--label", "label", "--features", "x0,x1,x2,x3",
        "--per-replica-batch", str(BATCH), "--epochs", str(EPOCHS), "--model-dir", model_dir, "--learning-rate", "0.01",
        "--checkpoint-every", str(CHECKPOINT_EVERY), "--log-every", "1", "--shuffle-buffer", "128", "--seed", "7", "--export", "none",
        "--debug-record-ids", *extra,
    ]


def _launch_and_kill(args: list[str], *, at_step: int, victim: int) -> str:
    """Launches the job and SIGKILLs worker ``victim`` once the chief reports step ``at_step``."""
    proc = subprocess.Popen([*LAUNCH, *args], env=fx.worker_env(), cwd=fx.REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    lines, pids = [], {}
    try:
        for line in proc.stdout:
            lines.append(line)
            if m := re.match(r"\[launch\] worker (\d+): pid (\d+)", line):
                pids[int(m[1])] = int(m[2])
            if (m := re.match(r"\[worker 0\] .* INFO step (\d+)/", line)) and int(m[1]) >= at_step:
                os.kill(pids[victim], 9)
                break
        rest, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out = "".join(lines) + rest
    assert proc.returncode == 1, out[-3000:]
    assert f"[launch] error: worker {victim} failed (killed by SIGKILL)" in out
    return out


@pytest.fixture(scope="module")
def soak(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """3 SIGKILLs at seeded steps, each followed by a relaunch; the last launch runs to the end."""
    root = tmp_path_factory.mktemp("faults")
    data = str(root / "ds")
    fx.make_dataset(data, rows=TRAIN_ROWS + EVAL_ROWS, num_shards=3, eval_fraction=EVAL_ROWS / (TRAIN_ROWS + EVAL_ROWS))
    model_dir = str(root / "run")
    outputs = [_launch_and_kill(_args(data, model_dir), at_step=step, victim=victim) for step, victim in KILLS]
    final = subprocess.run([*LAUNCH, *_args(data, model_dir, "--eval-split", "eval")], env=fx.worker_env(), cwd=fx.REPO,
                           capture_output=True, text=True, timeout=120, check=False)
    assert final.returncode == 0, final.stdout[-3000:]
    outputs.append(final.stdout)
    summaries = []
    for w in range(WORKERS):
        with open(summary_url(model_dir, w)) as f:
            summaries.append(json.load(f))
    # Where each launch resumed (0 for the first), from the chief's log.
    starts = [int(m[1]) if (m := re.search(r"\[worker 0\] .*resuming at step (\d+)", out)) else 0 for out in outputs]
    return {"data": data, "model_dir": model_dir, "outputs": outputs, "summaries": summaries, "starts": starts}


def test_soak_of_kills_ends_at_the_uninterrupted_step_count(soak: dict[str, Any]) -> None:
    starts = soak["starts"]
    assert starts[0] == 0 and all(0 < s < TOTAL and s % CHECKPOINT_EVERY == 0 for s in starts[1:]), starts
    assert starts == sorted(starts)  # every relaunch kept the progress of the ones before
    for s in soak["summaries"]:
        assert s["global_step"] == TOTAL and s["steps_per_epoch"] == SPE
        assert s["start_step"] == starts[-1] and s["steps"] == TOTAL - starts[-1]
        assert s["empty_replica_steps"] == 0 and s["examples"] == s["steps"] * BATCH
        assert s["eval_examples"] == EVAL_ROWS and 0 < s["eval_loss"] and 0 <= s["eval_accuracy"] <= 1


def _planned_ids(data: str, worker: int) -> list[int]:
    """Ids of the records the plan gives ``worker`` in an epoch, read straight from its pieces' files."""
    import tensorflow as tf

    from trainer.data import record_ids

    plan = plan_input(root=data, split="train", label="label", inputs=("x0",), num_workers=WORKERS, per_worker_batch=BATCH)
    assert plan.dropped_records == 0 and plan.steps_per_epoch == SPE
    ids = []
    for piece in plan.pieces(worker):
        records = tf.data.TFRecordDataset(plan.shard_urls[piece.shard]).skip(piece.skip).take(piece.take)
        ids += [int(i) for batch in records.batch(256) for i in record_ids(batch).numpy()]
    return ids


def test_no_record_twice_in_an_epoch_across_resumes(soak: dict[str, Any]) -> None:
    """From the ids each worker logged per step: a step redone after a resume read the same records;
    within an epoch, the records before and after every resume are disjoint, and together exactly
    the epoch's planned records."""
    everything: set[int] = set()
    redone = 0
    for w in range(WORKERS):
        planned = _planned_ids(soak["data"], w)
        assert len(planned) == len(set(planned)) == SPE * BATCH
        everything |= set(planned)
        for epoch in range(EPOCHS):
            by_step: dict[int, list[int]] = {}
            for step, ids in read_log(log_path(soak["model_dir"], w, epoch)):
                assert len(ids) == BATCH
                if step in by_step:  # logged by a killed run after its last checkpoint, then redone
                    assert ids == by_step[step], f"worker {w} step {step} read other records when redone"
                    redone += 1
                by_step[step] = ids
            assert sorted(by_step) == list(range(epoch * SPE, (epoch + 1) * SPE))
            read = [i for step in sorted(by_step) for i in by_step[step]]
            assert len(read) == len(set(read)) and set(read) == set(planned)
            for start in soak["starts"][1:]:
                if epoch * SPE < start < (epoch + 1) * SPE:
                    before = {i for s, ids in by_step.items() if s < start for i in ids}
                    after = {i for s, ids in by_step.items() if s >= start for i in ids}
                    assert not before & after and before | after == set(planned)
    assert len(everything) == TRAIN_ROWS  # the workers' plans cover the split, each record once
    assert redone > 0  # the kills fell between checkpoints, so the check above had steps to compare


def _resume(monkeypatch, capsys, soak: dict[str, Any], *changes: str, data: str | None = None,
            workers: int = WORKERS) -> tuple[int, str]:
    args = _args(data or soak["data"], soak["model_dir"])
    for flag, value in zip(changes[::2], changes[1::2]):
        if flag in args:
            args[args.index(flag) + 1] = value
        else:
            args += [flag, value]
    addresses = [f"127.0.0.1:{9 + i}" for i in range(workers)]  # never reached: the refusal comes first
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {"worker": addresses}, "task": {"type": "worker", "index": 0}}))
    code = train.main(args)
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    "changes, workers, message",
    [
        (("--per-replica-batch", "8"), WORKERS,
         "global batch (--per-replica-batch x replicas / --global-batch) 32 -> 16; steps per epoch (--steps-per-epoch) 30 -> 60"),
        # another worker count resumes (trainer.elastic) only with the same global batch: 3 workers of 16 make 48
        ((), 3, "global batch (--per-replica-batch x replicas / --global-batch) 32 -> 48; steps per epoch (--steps-per-epoch) 30 -> 20"),
        (("--split", "eval"), WORKERS, "split (--split) train -> eval; records in the split 960 -> 240"),
        (("--steps-per-epoch", "10"), WORKERS, "steps per epoch (--steps-per-epoch) 30 -> 10"),
        (("--seed", "8", "--shuffle-buffer", "64"), WORKERS, "--shuffle-buffer 128 -> 64; --seed 7 -> 8"),
    ],
)
def test_resume_under_another_plan_is_refused_in_one_line(monkeypatch, capsys, soak, changes, workers, message) -> None:
    code, err = _resume(monkeypatch, capsys, soak, *changes, workers=workers)
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"trainer.train: error: --model-dir {soak['model_dir']} holds checkpoints of another input plan (")
    assert message in err and "use a new --model-dir, or the settings the checkpoints were saved with" in err


def test_resume_on_another_data_set_is_refused(monkeypatch, capsys, soak, tmp_path) -> None:
    other = str(tmp_path / "other")
    fx.make_dataset(other, rows=TRAIN_ROWS + EVAL_ROWS, num_shards=3, eval_fraction=EVAL_ROWS / (TRAIN_ROWS + EVAL_ROWS),
                    run_id="run-20260102T000000Z-0badf00d")
    code, err = _resume(monkeypatch, capsys, soak, data=other)
    assert code == 2 and err.count("\n") == 1, err
    assert re.search(r"data set \(--data\) created \S+ run run-20260101T000000Z-0badcafe -> created \S+ run "
                     r"run-20260102T000000Z-0badf00d", err), err


def test_same_plan_with_more_epochs_may_resume(soak) -> None:
    from trainer.cluster import ClusterInfo
    from trainer.resume import check_resume, plan_url
    from trainer.worker import plan_job

    config = train.parse_args(_args(soak["data"], soak["model_dir"], "--epochs", "5"))
    cluster = ClusterInfo(jobs={"worker": ("h:1", "h:2")}, task_index=1)
    check_resume(soak["model_dir"], plan_job(config, cluster=cluster, local_replicas=1).identity, is_chief=False)
    with open(plan_url(soak["model_dir"])) as f:
        saved = json.load(f)
    assert (saved["num_workers"], saved["per_worker_batch"], saved["steps_per_epoch"]) == (WORKERS, BATCH, SPE)
