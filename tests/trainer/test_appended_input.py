"""An appended data set (issue 56) read by real MWMS workers through ``trainer.input``: three generations
of unequal shards (a tiny one among them), equal steps on every worker for 1, 2 and 3 workers, every
record read at most once an epoch, the generations mixed within an epoch, and an earlier version read
with ``data_version``."""
from __future__ import annotations

import os

import pytest

from tests.conftest import run_cli, write_csv
from tests.trainer import workers as wk

PROGRAM = os.path.join(os.path.dirname(__file__), "input_worker.py")
GLOBAL, EPOCHS = 24, 2
SIZES = (360, 96, 3)  # the base, a day's append, a tiny append


def _rows(start: int, n: int) -> list[dict]:
    return [{"x0": f"{i % 7}.5", "x1": f"{i % 3}.5", "x2": "1.5", "x3": "-1.5", "id": i, "label": i % 2}
            for i in range(start, start + n)]


@pytest.fixture(scope="module")
def appended(tmp_path_factory: pytest.TempPathFactory) -> str:
    folder = tmp_path_factory.mktemp("appended")
    out, start = folder / "ds", 0
    for k, n in enumerate(SIZES):
        path = write_csv(folder / f"in-{k}.csv", _rows(start, n))
        run_cli("shardprep.run", "--input", path, "--output", out, "--num-shards", "4", *(["--append"] if k else []),
                check=True)
        start += n
    return str(out)


def test_open_plans_equal_steps_over_generations_for_any_worker_count(appended: str) -> None:
    import trainer.input as ti

    total = sum(SIZES)
    for workers in range(1, 7):
        inp = ti.open(appended, label="label", global_batch_size=GLOBAL - GLOBAL % workers, num_workers=workers)
        counts = [inp.plan.worker_plan.records(w) for w in range(workers)]
        assert max(counts) - min(counts) <= 1 and sum(counts) == total, (workers, counts)
    first = ti.open(appended, label="label", global_batch_size=GLOBAL, num_workers=2, data_version=1)
    assert first.plan.num_records == SIZES[0]


@pytest.mark.slow
@pytest.mark.parametrize("workers", [2, 3])
def test_mwms_workers_take_equal_steps_over_generations_mixed(appended: str, tmp_path, workers: int) -> None:
    log = str(tmp_path / "run")
    outs = wk.run_workers(workers, [PROGRAM, "custom", appended, str(tmp_path / "ckpt"), log, "0"],
                          env={"GLOBAL_BATCH": str(GLOBAL), "EPOCHS": str(EPOCHS)})
    lines = [next(line for line in out.splitlines() if line.startswith("worker ")) for out in outs]
    assert len({line.split(":")[1].split(",")[0] for line in lines}) == 1, lines  # the same steps on every worker
    steps = wk.step_ids(log, workers)
    per_epoch = len(steps) // EPOCHS
    assert per_epoch == (sum(SIZES) // workers) // (GLOBAL // workers)
    for e in range(EPOCHS):
        epoch = steps[e * per_epoch:(e + 1) * per_epoch]
        ids = [i for batch in epoch for part in batch for i in part]
        assert len(ids) == len(set(ids)) == per_epoch * GLOBAL  # no record twice in an epoch
        first_half = {i for batch in epoch[:per_epoch // 2] for part in batch for i in part}
        assert any(i >= SIZES[0] for i in first_half), "the appended records all came last"
