"""``trainer.elastic``: the epoch order, the handover, the exact deal of an epoch's rest, reads by position."""
from __future__ import annotations

import numpy as np
import pytest

from shardprep import manifest
from tests import trainer_fixtures as fx
from trainer.elastic import ElasticError, EpochOrder, deal, handover, read_positions


def test_epoch_order_records_which_worker_count_started_each_epoch() -> None:
    order = EpochOrder.start(2)
    assert order.resumed(start_step=40, steps_per_epoch=20, workers=2) == order  # the same count: nothing new
    mid = order.resumed(start_step=27, steps_per_epoch=20, workers=3)  # epoch 1 was started by 2: 3 start epoch 2
    assert mid.segments == ((0, 2), (2, 3)) and [mid.workers(e) for e in range(4)] == [2, 2, 3, 3]
    at_start = order.resumed(start_step=40, steps_per_epoch=20, workers=3)
    assert at_start.segments == ((0, 2), (2, 3))
    back = mid.resumed(start_step=30, steps_per_epoch=20, workers=2)  # killed again in epoch 1: epoch 2 not started
    assert back.segments == ((0, 2),)
    assert EpochOrder.from_json(mid.to_json()) == mid
    with pytest.raises(ElasticError):
        EpochOrder(((1, 2),))
    with pytest.raises(ElasticError, match="damaged"):
        EpochOrder.from_json("{")


def test_handover_only_mid_epoch_with_another_count() -> None:
    order = EpochOrder(((0, 2), (2, 3)))
    assert handover(order, start_step=27, steps_per_epoch=20, workers=3).__dict__ == {"epoch": 1, "done": 7, "old_workers": 2}
    assert handover(order, start_step=27, steps_per_epoch=20, workers=2) is None  # the epoch's own count: plain streams
    assert handover(order, start_step=40, steps_per_epoch=20, workers=2) is None  # an epoch's start
    assert handover(order, start_step=45, steps_per_epoch=20, workers=2).old_workers == 3


@pytest.mark.parametrize("old,new", [(2, 3), (3, 2), (2, 4), (4, 1)])
def test_deal_keeps_every_global_batch_and_splits_it_evenly(old: int, new: int) -> None:
    global_batch, steps, start = 12, 5, 2
    b = global_batch // old
    rng = np.random.default_rng(0)
    streams = np.split(rng.permutation(steps * global_batch), old)
    dealt = [deal(streams, global_batch=global_batch, start=start, stop=steps, workers=new, worker=w) for w in range(new)]
    assert {len(d) for d in dealt} == {(steps - start) * global_batch // new}  # equal steps
    for j in range(start, steps):
        was = sorted(int(p) for s in streams for p in s[j * b:(j + 1) * b])
        share = global_batch // new
        now = sorted(int(p) for d in dealt for p in d[(j - start) * share:(j - start + 1) * share])
        assert now == was  # global batch j: the records the old workers would have trained on at step j
    with pytest.raises(ElasticError, match="does not divide"):
        deal(streams, global_batch=global_batch, start=start, stop=steps, workers=5, worker=0)


@pytest.mark.parametrize("gzip", [False, True])
def test_read_positions_returns_the_records_in_the_order_asked(tmp_path, gzip: bool) -> None:
    rows = [{"x": float(i)} for i in range(30)]
    from shardprep.schema import FeatureSpec

    fx.write_dataset(str(tmp_path), {"train": fx.deal(rows, 3)}, features={"x": FeatureSpec("float32")}, gzip=gzip)
    m = manifest.load(str(tmp_path))
    positions = np.array([29, 0, 10, 11, 5, 20])
    got = [r for chunk in read_positions(str(tmp_path), m.splits["train"], positions, compression=m.compression,
                                         split_name="train", chunk=4) for r in chunk]
    import tensorflow as tf

    values = [float(tf.io.parse_single_example(r, {"x": tf.io.FixedLenFeature([], tf.float32)})["x"]) for r in got]
    # position p: shard p // 10, record p % 10, which holds row (p % 10) * 3 + p // 10 (rows dealt round-robin)
    assert values == [float((p % 10) * 3 + p // 10) for p in positions]


# --- through trainer.launch / trainer.train: killed mid-epoch with W workers, resumed with W' ----------------

CLI_ROWS, CLI_GLOBAL, CLI_EPOCHS = 480, 24, 3
CLI_SPE = CLI_ROWS // CLI_GLOBAL  # 20 steps per epoch with 2 workers and with 3 (2 shards: range mode with 3)


def _launch(workers: int, data: str, model_dir: str, *, seed: int = 7, kill_at: int | None = None) -> tuple[int, str]:
    """Runs the CLI job on ``workers`` local workers; ``kill_at``: interrupts the launcher once worker 0
    reports that step (the checkpoints every 5 steps stay). Returns (exit code, output)."""
    import re
    import signal
    import subprocess
    import sys

    args = [sys.executable, "-m", "trainer.launch", "--workers", str(workers), "--restarts", "0", "--", "--data", data,
            "--model", "tests.trainer_fixtures:small_model", "--label", "label", "--features", "x0,x1,x2,x3",
            "--global-batch", str(CLI_GLOBAL), "--epochs", str(CLI_EPOCHS), "--model-dir", model_dir,
            "--checkpoint-every", "5", "--log-every", "1", "--shuffle-buffer", "64", "--seed", str(seed),
            "--export", "none", "--debug-record-ids"]
    proc = subprocess.Popen(args, env=fx.worker_env(), cwd=fx.REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    assert proc.stdout is not None
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            m = re.match(r"\[worker 0\] .* INFO step (\d+)/", line)
            if kill_at is not None and m and int(m[1]) >= kill_at:
                proc.send_signal(signal.SIGINT)
                kill_at = None
        proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, "".join(lines)


def _ids_by_step(debug: str, workers: int, steps: range) -> dict[int, list[int]]:
    """Global step -> the ids all ``workers`` logged for it (the last line of each worker for that step)."""
    import os

    from trainer.idlog import read_log

    out: dict[int, list[int]] = {}
    for w in range(workers):
        for e in range(CLI_EPOCHS):
            path = os.path.join(debug, f"worker-{w}-epoch-{e}.ids")
            if not os.path.exists(path):
                continue
            mine: dict[int, list[int]] = {}
            for step, ids in read_log(path):
                mine[step] = ids
            for step, ids in mine.items():
                if step in steps:
                    out.setdefault(step, []).extend(ids)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("before,after", [(2, 3), (3, 2)])
def test_cli_resume_with_another_worker_count_trains_every_record_once(tmp_path, before: int, after: int) -> None:
    import json
    import os
    import re
    import shutil

    from trainer.metrics import summary_url

    data, model_dir = str(tmp_path / "ds"), str(tmp_path / "run")
    fx.make_dataset(data, rows=CLI_ROWS, num_shards=2, eval_fraction=0.0)
    code, out = _launch(before, data, model_dir, kill_at=CLI_SPE + 8)
    assert code == 130, out[-3000:]
    shutil.move(os.path.join(model_dir, "debug"), str(tmp_path / "debug1"))
    code, out = _launch(after, data, model_dir)
    assert code == 0, out[-3000:]
    start = int(re.search(r"\[worker 0\] .*resuming at step (\d+)", out)[1])
    assert CLI_SPE < start < 2 * CLI_SPE and start % 5 == 0, start  # mid-epoch 1, at a checkpoint
    assert f"elastic resume: epoch 1 was started by {before} worker(s)" in out
    steps = {**_ids_by_step(str(tmp_path / "debug1"), before, range(start)),
             **_ids_by_step(os.path.join(model_dir, "debug"), after, range(start, CLI_EPOCHS * CLI_SPE))}
    assert sorted(steps) == list(range(CLI_EPOCHS * CLI_SPE))
    assert all(len(ids) == CLI_GLOBAL for ids in steps.values())
    for e in range(CLI_EPOCHS):
        ids = [i for s in range(e * CLI_SPE, (e + 1) * CLI_SPE) for i in steps[s]]
        assert len(ids) == len(set(ids)) == CLI_ROWS, f"epoch {e}: a record twice or missing"
    for w in range(after):  # every worker took the same steps after the change
        with open(summary_url(model_dir, w)) as f:
            summary = json.load(f)
        assert (summary["start_step"], summary["global_step"], summary["steps"]) == (start, 60, 60 - start)
    code, out = _launch(after, data, model_dir, seed=8)  # another seed: refused, before any step
    assert code != 0 and "(--seed 7 -> 8)" in out, out[-2000:]
