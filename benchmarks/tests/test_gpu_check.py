"""The GPU check's CPU mode end to end (real re-shard, real trainer processes), and its arithmetic.

The CPU mode runs in CI so that the check a GPU loan depends on cannot rot between loans.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from benchmarks.gpu_check import report, training
from benchmarks.gpu_check.procs import REPO, events, first_event

CPU_PARTS = {
    "environment", "dataset", "cold_start", "train_custom_float32", "train_custom_bfloat16", "input_pipeline",
    "train_fit_float32", "train_fit_bfloat16", "image_model", "cores_per_gpu",
}


@pytest.mark.slow
def test_cpu_mode_runs_every_part(tmp_path) -> None:
    out = tmp_path / "check"
    proc = subprocess.run([sys.executable, "-m", "benchmarks.gpu_check", str(out), "--cpu"], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    doc = json.loads((out / "gpu_check.json").read_text())
    parts = doc["parts"]
    failed = {name: part.get("error") for name, part in parts.items() if not part["ok"]}
    assert set(parts) == CPU_PARTS and not failed, (failed, proc.stdout[-3000:], proc.stderr[-3000:])
    assert proc.returncode == 0 and doc["mode"] == "cpu"
    for name in CPU_PARTS:
        assert name in proc.stdout  # the table has a row for every part
    train = {name: part for name, part in parts.items() if name.startswith("train_")}
    for name, part in train.items():
        assert part["final_loss"] < part["first_loss"] and part["loss_fell"], name
        assert part["steps"] == 16_384 // 128 and part["all_reduce"] == "ring" and part["steps_per_second"] > 0, name
        if "custom" in name:  # Keras fit does not expose the wait for the next batch
            assert 0 <= part["input_wait_fraction"] <= 1, name
    assert train["train_custom_bfloat16"]["precision"] == "mixed_bfloat16"
    assert train["train_fit_float32"]["precision"] == "float32"
    assert parts["dataset"]["records_min"] == parts["dataset"]["records_max"] == 16_384 // 4
    cold = parts["cold_start"]
    assert 0 < cold["first_log_s"] <= cold["strategy_ready_s"] <= cold["first_step_done_s"] <= cold["process_s"]
    rows = parts["input_pipeline"]["by_cores"]
    assert rows[0]["cores"] == 1 and rows[0]["cpus"] == [rows[0]["cpus"][0]]  # really pinned to one core
    assert all(r[v]["examples_per_second"] > 0 for r in rows for v in ("in_turn", "parallel_read"))
    assert parts["cores_per_gpu"]["gpu_wants_examples_per_second"] > 0
    assert parts["environment"]["cpus_usable"] >= 1 and parts["environment"]["tensorflow"]
    assert (out / "gpu_check.txt").read_text().strip() in proc.stdout


def test_bad_usage_is_one_line_and_exit_2(tmp_path) -> None:
    proc = subprocess.run([sys.executable, "-m", "benchmarks.gpu_check", str(tmp_path), "--cpu", "--rows", "10"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "--rows 10" in proc.stderr


def test_log_events_are_timed_from_the_spawn() -> None:
    text = "$ python -m trainer.train\nnoise\n2030-01-02 03:04:05,500 INFO strategy ready: 1 replica(s) in sync, " \
           "nccl all-reduce\n2030-01-02 03:04:07,250 INFO step 1/3 epoch 1 loss 0.6\n"
    (t0, _), (t1, msg) = events(text)
    assert t1 - t0 == pytest.approx(1.75) and msg.startswith("step 1/3")
    assert first_event(text, r"^step 1/", since=t0 - 2) == pytest.approx(3.75)
    assert first_event(text, r"^never", since=t0) is None


def test_cores_per_gpu_compares_the_fastest_step_with_the_pipeline() -> None:
    slow = {"step_time_mean_s": 0.01, "global_batch": 512, "input_wait_fraction": 0.0}  # 51,200 ex/s
    fast = {"step_time_mean_s": 0.004, "global_batch": 512, "input_wait_fraction": 0.2}  # 512 / 0.0032 = 160,000
    rates = [(1, 50_000.0), (4, 150_000.0), (16, 400_000.0)]
    inputs = {"by_cores": [{"cores": k, "in_turn": {"examples_per_second": r},
                            "parallel_read": {"examples_per_second": r / 3}} for k, r in rates]}
    doc = training.cores_per_gpu({"a": slow, "b": fast}, inputs)
    assert doc["fastest_run"] == "b" and doc["gpu_wants_examples_per_second"] == pytest.approx(160_000)
    assert doc["in_turn"]["cores_enough"] == 16 and doc["in_turn"]["cores_linear_estimate"] == pytest.approx(3.2)
    assert doc["parallel_read"]["cores_enough"] is None  # 133,333 at most: even 16 cores fall short


def test_table_shows_failures_with_their_reason() -> None:
    doc = {"mode": "gpu", "started": "now", "wall_s": 1.0, "parts": {
        "dataset": {"ok": True, "rows": 10, "csv_mb": 0.1, "shards": 2, "records_min": 5, "records_max": 5,
                    "reshard_s": 1.0, "seconds": 1.0},
        "train_custom_float16": {"ok": False, "error": "exit 1: boom", "seconds": 2.0},
        "cores_per_gpu": {"ok": False, "skipped": True, "error": "skipped: budget", "seconds": 0.0},
    }}
    lines = report.render(doc).splitlines()
    assert "2 shards of 5-5 records" in lines[3] and " ok " in lines[3]
    assert "FAIL" in lines[4] and lines[4].endswith("exit 1: boom")
    assert "skipped" in lines[5]
