"""``trainer.eta`` (issue 58 item 3): the planned steps, the ETA from the first steps timed, the warning for a
long run without a GPU, and the ``--eval-records`` cap; ``trainer.defaults``' short BERT run on CPU; one real
run whose log holds the lines."""
from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest

from tests import trainer_fixtures as fx
from trainer import defaults, eta
from trainer.settings import EVAL_RECORDS, ConfigError, TrainConfig
from trainer.train import parse_args


@pytest.mark.parametrize("seconds, text", [(0, "0 s"), (44.6, "45 s"), (725, "12 min 5 s"), (7985, "2 h 13 min")])
def test_format_duration(seconds: float, text: str) -> None:
    assert eta.format_duration(seconds) == text


def test_the_cpu_warning_only_for_a_long_run_without_a_gpu() -> None:
    long = dict(steps_left=1699, seconds_per_step=4.7)  # the BERT-tiny run: about 2.2 h
    assert eta.cpu_warning(**long, on_cpu=False) is None
    assert eta.cpu_warning(steps_left=700, seconds_per_step=5.0, on_cpu=True) is None  # 58 min
    warning = eta.cpu_warning(**long, on_cpu=True)
    assert warning is not None and "2 h 13 min" in warning
    for flag in ("--steps-per-epoch", "--epochs", "--per-replica-batch"):
        assert flag in warning
    short = eta.steps_within(eta.SHORT_RUN_SECONDS, 4.7)
    assert f"--epochs 1 --steps-per-epoch {short}" in warning and short * 4.7 <= eta.SHORT_RUN_SECONDS


def test_the_plan_and_eta_lines() -> None:
    line = eta.plan_line(start_step=0, total_steps=1699, steps_per_epoch=1699, global_batch=256)
    assert line.startswith("planned: 1,699 steps (1 epoch(s) x 1,699 steps, global batch 256) from the start")
    assert "from step 100 (1,599 to go)" in eta.plan_line(start_step=100, total_steps=1699, steps_per_epoch=1699,
                                                           global_batch=256)
    assert "ETA 1 h 40 min" in eta.eta_line(steps_left=1200, seconds_per_step=5.0)


def test_the_step_clock_times_the_steps_after_the_first_and_logs_once(caplog) -> None:
    now = [100.0]
    clock = eta.StepClock(start_step=10, total_steps=2000, on_cpu=True, clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="trainer.eta"):
        clock.on_step(11)  # the first step: tracing, not timed
        for step in range(12, 12 + eta.TIMED_STEPS):
            now[0] += 3.0
            clock.on_step(step)
        for step in range(12 + eta.TIMED_STEPS, 20 + eta.TIMED_STEPS):
            now[0] += 100.0  # later steps change nothing: measured once
            clock.on_step(step)
    assert clock.seconds_per_step == pytest.approx(3.0)
    infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert infos == [eta.eta_line(steps_left=2000 - 16, seconds_per_step=3.0)]
    assert len(warnings) == 1 and "no GPU is visible" in warnings[0]


def test_the_step_clock_stays_silent_off_the_chief_and_on_a_gpu(caplog) -> None:
    with caplog.at_level(logging.INFO, logger="trainer.eta"):
        eta.StepClock(start_step=0, total_steps=10_000, on_cpu=True, enabled=False).on_step(1)
        gpu = eta.StepClock(start_step=0, total_steps=10_000, on_cpu=False, clock=iter(range(0, 100, 10)).__next__)
        for step in range(1, 2 + eta.TIMED_STEPS):
            gpu.on_step(step)
    assert [r.levelno for r in caplog.records] == [logging.INFO]  # the ETA, no warning


@pytest.mark.parametrize("records, workers, batch, cap", [
    (None, 2, 32, None), (10_000, 1, 32, 313), (10_000, 2, 32, 157), (10, 4, 32, 1), (1, 1, 1, 1),
])
def test_eval_batches_cap(records, workers, batch, cap) -> None:
    assert eta.eval_batches_cap(records, workers=workers, batch_size=batch) == cap


def test_eval_records_flag() -> None:
    base = ["--data", "d", "--label", "y"]
    assert parse_args(base).eval_records == EVAL_RECORDS
    assert parse_args([*base, "--eval-records", "all"]).eval_records is None
    assert parse_args([*base, "--eval-records", "500"]).eval_records == 500
    with pytest.raises(ConfigError, match="--eval-records 0"):
        TrainConfig(data="d", model="mlp", label="y", model_dir="m", epochs=1, eval_records=0)


def test_bert_defaults_without_a_gpu() -> None:
    assert defaults.bert_cpu_batch(256) == defaults.BERT_CPU_BATCH == 32 and defaults.bert_cpu_batch(8) == 8
    assert defaults.bert_cpu_steps(None, None) == defaults.BERT_CPU_STEPS
    assert defaults.choose_epochs(defaults.BERT_CPU_STEPS) == 1
    assert defaults.bert_cpu_steps(None, 3) is None  # --epochs given: whole epochs, as asked
    assert defaults.bert_cpu_steps(1000, None) == 1000


def test_a_run_logs_its_plan_and_eta_and_caps_evaluation(tmp_path) -> None:
    from tests.conftest import ROOT

    fx.make_dataset(str(tmp_path / "ds"), rows=200, num_shards=2, eval_fraction=0.2)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run([sys.executable, "-m", "trainer.train", "--data", "ds", "--label", "label", "--model", "mlp",
                           "--epochs", "1", "--per-replica-batch", "8", "--eval-split", "eval", "--eval-records", "16",
                           "--model-dir", "m"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "planned: 20 steps (1 epoch(s) x 20 steps, global batch 8) from the start" in out
    assert f"(timed over {eta.TIMED_STEPS} steps): 14 steps left, ETA" in out
    assert "eval on split 'eval': 16 examples (16 on this worker; at most 2 batches of 8 a worker of the split's 40" in out
