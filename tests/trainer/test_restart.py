"""``trainer.launch --restarts 1`` (the default): a worker SIGKILLed mid-epoch, the cluster restarted
from the default checkpoints (time-based and at epoch ends), the job ends where an unkilled one does,
and no record is read twice within the resumed epoch. Real processes."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from tests import trainer_fixtures as fx
from trainer.idlog import log_path, read_log
from trainer.metrics import summary_url

pytestmark = pytest.mark.slow

WORKERS, BATCH, EPOCHS, ROWS = 2, 16, 3, 960
SPE = ROWS // (WORKERS * BATCH)  # 30 steps per epoch, 3 shards of 320: nothing dropped
TOTAL = EPOCHS * SPE
KILL_AT = SPE + 12  # mid-epoch 2: the restart resumes from the epoch-end checkpoint (or a later time-based one)


def test_killed_worker_is_restarted_and_the_job_ends_at_the_same_step(tmp_path) -> None:
    data, model_dir = str(tmp_path / "ds"), str(tmp_path / "run")
    fx.make_dataset(data, rows=ROWS, num_shards=3, eval_fraction=0.0)
    args = [sys.executable, "-m", "trainer.launch", "--workers", str(WORKERS), "--", "--data", data,
            "--model", "tests.trainer_fixtures:small_model", "--label", "label", "--features", "x0,x1,x2,x3",
            "--per-replica-batch", str(BATCH), "--epochs", str(EPOCHS), "--model-dir", model_dir,
            "--learning-rate", "0.01", "--log-every", "1", "--shuffle-buffer", "128", "--seed", "7", "--export", "none",
            "--debug-record-ids"]
    proc = subprocess.Popen(args, env=fx.worker_env(), cwd=fx.REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    assert proc.stdout is not None
    lines, pids, killed = [], {}, False
    try:
        for line in proc.stdout:
            lines.append(line)
            if m := re.match(r"\[launch\] worker (\d+): pid (\d+)", line):
                pids[int(m[1])] = int(m[2])
            if not killed and (m := re.match(r"\[worker 0\] .* INFO step (\d+)/", line)) and int(m[1]) >= KILL_AT:
                os.kill(pids[1], 9)
                killed = True
        proc.wait(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out = "".join(lines)
    assert proc.returncode == 0, out[-3000:]
    assert out.count("[launch] restart 1 of 1: worker 1 killed by SIGKILL; restarting all 2 worker(s)") == 1, out[-3000:]
    start = int(re.search(r"\[worker 0\] .*resuming at step (\d+)", out)[1])
    assert SPE <= start <= KILL_AT + 1
    print(f"killed worker 1 at step >= {KILL_AT}; restarted, resumed at step {start}, ended at {TOTAL}")
    for w in range(WORKERS):
        with open(summary_url(model_dir, w)) as f:
            summary = json.load(f)
        assert summary["global_step"] == TOTAL and summary["start_step"] == start  # as an unkilled run ends
        for epoch in range(EPOCHS):
            by_step: dict[int, list[int]] = {}
            for step, ids in read_log(log_path(model_dir, w, epoch)):
                if step in by_step:  # read by the killed run after its last checkpoint, then redone alike
                    assert ids == by_step[step], f"worker {w} step {step} read other records when redone"
                by_step[step] = ids
            assert sorted(by_step) == list(range(epoch * SPE, (epoch + 1) * SPE))
            read = [i for step in sorted(by_step) for i in by_step[step]]
            assert len(read) == len(set(read)) == SPE * BATCH  # no record twice within the epoch
