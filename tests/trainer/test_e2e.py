"""End to end: real trainer processes (MWMS on loopback), real files, real measurements."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from shardprep import manifest
from tests import trainer_fixtures as fx
from trainer.metrics import summary_url

pytestmark = pytest.mark.slow

TRAIN = [sys.executable, "-m", "trainer.train"]
LAUNCH = [sys.executable, "-m", "trainer.launch"]
KEYS = {
    "steps", "examples", "empty_replica_steps", "input_wait_fraction", "step_time_mean_s", "examples_per_second",
    "first_loss", "final_loss", "data_mode", "allreduce_fraction", "worker", "accuracy",
    "input_wait_floor_fraction", "eval_loss", "eval_accuracy", "eval_examples",
}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> str:
    """3 600 training rows in 3 balanced shards: 2 workers read it in range mode."""
    root = str(tmp_path_factory.mktemp("trainer-ds") / "ds")
    fx.make_dataset(root, rows=4000, num_shards=3)
    return root


def _summaries(model_dir: str, workers: int) -> list[dict]:
    out = []
    for w in range(workers):
        with open(summary_url(model_dir, w)) as f:
            out.append(json.load(f))
    return out


def _launch(dataset: str, model_dir: str, *extra: str, timeout: int = 120, module: str = "trainer.train"
            ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*LAUNCH, "--workers", "2", "--module", module, "--", "--data", dataset, "--model", "mlp", "--label", "label",
         "--per-replica-batch", "32", "--model-dir", model_dir, "--learning-rate", "0.01", *extra],
        env=fx.worker_env(), capture_output=True, text=True, timeout=timeout, cwd=fx.REPO, check=False,
    )


def test_demo_reshards_and_trains_two_equal_workers(tmp_path) -> None:
    """``make demo`` at a smaller size: uneven CSVs -> shardprep.run -> 2 workers -> the table.
    (Kills and resumes: ``test_trainer_faults``.)"""
    out = tmp_path / "demo"
    run = subprocess.run(
        [sys.executable, "-m", "trainer.demo", "--out", str(out), "--rows", "4000"],
        env=fx.worker_env(), capture_output=True, text=True, timeout=300, cwd=fx.REPO, check=False,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    summaries = _summaries(str(out / "run"), 2)
    a, b = summaries
    assert KEYS <= set(a) and KEYS <= set(b)
    assert a["steps"] == b["steps"] == a["global_step"] == 2 * a["steps_per_epoch"] > 0
    assert a["empty_replica_steps"] == b["empty_replica_steps"] == 0
    assert a["examples"] == b["examples"] == a["steps"] * 64
    assert a["data_mode"] == b["data_mode"] == "file"
    assert a["final_loss"] < 0.8 * a["first_loss"] and a["accuracy"] > 0.75
    for s in summaries:
        assert 0 <= s["input_wait_fraction"] < 1 and 0 < s["allreduce_fraction"]
        # The floor is measured (the in-memory probe every 10 steps), not derived from the wait.
        assert 0 < s["input_wait_floor_fraction"] < 1 and s["input_wait_floor_s"] > 0
        assert s["eval_split"] == "eval" and s["eval_accuracy"] > 0.75 and s["eval_loss"] < a["first_loss"]
    eval_records = manifest.load(str(out / "ds")).splits["eval"].num_records
    assert a["eval_examples"] == b["eval_examples"] == eval_records  # every record of the eval split, once
    assert (out / "run" / "export" / "model.keras").exists()
    assert sorted(os.listdir(out / "run")) == ["checkpoints", "export", "summary", "tensorboard"]
    table = run.stdout.splitlines()
    heads = [i for i, line in enumerate(table) if line.split()[:3] == ["worker", "mode", "steps"]]
    assert len(heads) == 1, run.stdout  # the launcher's table, once (the demo does not print it again)
    head = heads[0]
    assert [line.split()[:5] for line in table[head + 1: head + 3]] == [
        [str(w), "file", str(a["steps"]), str(a["examples"]), "0"] for w in (0, 1)]
    assert table[-2].startswith(f"eval split 'eval': {eval_records} examples, loss {a['eval_loss']:.4f}, accuracy")
    assert table[-1] == "equal steps on every worker: True; empty replica-steps: 0"


def test_naive_per_file_input_reports_empty_replica_steps(dataset: str, tmp_path) -> None:
    model_dir = str(tmp_path / "naive")
    # The baseline is benchmark code: benchmarks.naive_trainer, not a mode of the product.
    run = _launch(dataset, model_dir, "--epochs", "1", module="benchmarks.naive_trainer")
    assert run.returncode == 0, run.stdout[-3000:]
    a, b = _summaries(model_dir, 2)
    # Worker 0 reads shards 0 and 2 (2 400 rows), worker 1 shard 1 (1 200): TF keeps worker 1
    # stepping on empty batches until worker 0 runs dry.
    assert a["steps"] == b["steps"] == -(-2400 // 32)
    assert (a["examples"], b["examples"]) == (2400, 1200)
    assert a["empty_replica_steps"] == 0 and b["empty_replica_steps"] == a["steps"] - -(-1200 // 32) > 0


def test_two_workers_keras_fit_text_model(dataset: str, tmp_path) -> None:
    model_dir = str(tmp_path / "fit")
    run = subprocess.run(
        [*LAUNCH, "--workers", "2", "--", "--data", dataset, "--model", "text", "--label", "label",
         "--global-batch", "64", "--epochs", "1", "--loop", "fit", "--model-dir", model_dir, "--export", "savedmodel",
         "--learning-rate", "0.01", "--eval-split", "eval"],
        env=fx.worker_env(), capture_output=True, text=True, timeout=120, cwd=fx.REPO, check=False,
    )
    assert run.returncode == 0, run.stdout[-3000:]
    for s in _summaries(model_dir, 2):
        assert s["loop"] == "fit" and s["steps"] == 3600 // 64 and s["empty_replica_steps"] == 0
        assert s["examples"] == s["steps"] * 32 and s["input_wait_fraction"] is None
        assert s["final_loss"] < s["first_loss"] and s["accuracy"] > 0.6
        assert s["eval_examples"] == 400 and s["eval_accuracy"] > 0.6  # 200 records a worker, range mode
    assert os.path.exists(os.path.join(model_dir, "export", "saved_model", "saved_model.pb"))


def test_single_process_user_model_float16_staged(dataset: str, tmp_path) -> None:
    model_dir = str(tmp_path / "user")
    run = subprocess.run(
        [*TRAIN, "--data", dataset, "--model", "tests.trainer_fixtures:small_model", "--label", "label",
         "--features", "x0,x1,x2", "--per-replica-batch", "32", "--epochs", "2", "--steps-per-epoch", "10",
         "--mixed-precision", "float16", "--scale-lr", "--stage-dir", str(tmp_path / "stage"),
         "--model-dir", model_dir, "--eval-split", "eval"],
        env=fx.worker_env(), capture_output=True, text=True, timeout=120, cwd=fx.REPO, check=False,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    (s,) = _summaries(model_dir, 1)
    assert s["steps"] == 20 and s["precision"] == "mixed_float16" and s["dropped_records_per_epoch"] == 3600 - 320
    assert sorted(os.listdir(tmp_path / "stage" / "train")) == [f"train-0000{i}-of-00003.tfrecord" for i in range(3)]
    assert os.listdir(tmp_path / "stage" / "eval") == ["eval-00000-of-00001.tfrecord"]  # scored from the staged copy
    assert s["eval_examples"] == 400 and s["eval_loss"] > 0
