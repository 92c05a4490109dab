"""``trainer.controller.Controller`` with its collaborators faked: what it runs, saves, reports, scores, exports.

The collaborators are plain Python objects meeting the protocols, so these tests need no TensorFlow;
the real runners, checkpoints, evaluator and exporter are driven by it in test_e2e, test_restart,
test_faults and test_tabular_training (real MWMS workers).
"""
from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from trainer.controller import Controller, LoopSettings, OnStep, RunResult


class Runner:
    """Runs each asked-for step, reports loss ``1/step``, and remembers the epochs it was asked for."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int, int]] = []

    def run_epoch(self, *, epoch: int, start: int, stop: int, on_step: OnStep) -> int:
        self.calls.append((epoch, start, stop))
        for step in range(start, stop):
            on_step(step + 1, 1.0 / (step + 1))
        return stop


class Saver:
    def __init__(self) -> None:
        self.saved: list[int] = []
        self.closed = False

    def save(self, step: int) -> None:
        if not self.saved or self.saved[-1] != step:
            self.saved.append(step)

    def close(self) -> None:
        self.closed = True


class Progress:
    def __init__(self) -> None:
        self.lines: list[tuple[int, int, bool]] = []
        self.closed = False

    def update(self, *, step: int, epoch: int, loss: float, force: bool = False) -> None:
        self.lines.append((step, epoch, force))

    def close(self) -> None:
        self.closed = True


class Meter:
    def __init__(self) -> None:
        self.resets = 0

    def reset_accuracy(self) -> None:
        self.resets += 1


class Scorer:
    def __init__(self) -> None:
        self.at: list[int] = []

    def evaluate(self, step: int) -> dict[str, Any]:
        self.at.append(step)
        return {"eval_loss": 0.5, "eval_accuracy": 0.75}


class Writer:
    def __init__(self) -> None:
        self.at: list[int] = []

    def export(self, step: int) -> str | None:
        self.at.append(step)
        return "model_dir/export/model.keras"


def _controller(settings: LoopSettings, **parts: Any) -> tuple[Controller, Runner, Progress]:
    runner, progress = Runner(), Progress()
    return Controller(runner=runner, settings=settings, progress=progress, **parts), runner, progress


def test_a_run_trains_epoch_by_epoch_then_scores_exports_and_closes_the_checkpoints():
    saver, meter, scorer, writer = Saver(), Meter(), Scorer(), Writer()
    controller, runner, progress = _controller(LoopSettings(0, 10, 4, checkpoint_every=3), checkpoints=saver,
                                               evaluator=scorer, exporter=writer, meter=meter)
    result = controller.run()
    assert result == RunResult(10, {"eval_loss": 0.5, "eval_accuracy": 0.75}, "model_dir/export/model.keras")
    assert runner.calls == [(0, 0, 4), (1, 4, 8), (2, 8, 10)]  # the last epoch cut at total_steps
    assert saver.saved == [3, 6, 9, 10] and saver.closed  # every 3 steps, and the final step once
    assert meter.resets == 3  # accuracy counted over each epoch
    assert scorer.at == [10] and writer.at == [10]
    assert [s for s, _, force in progress.lines if force] == [4, 8] and progress.closed
    assert [(s, e) for s, e, _ in progress.lines][3:5] == [(4, 0), (5, 1)]


def test_time_based_checkpoints_save_at_every_epochs_end_and_at_an_interval_from_the_step_time():
    saver = Saver()
    controller, _, _ = _controller(LoopSettings(0, 30, 10, checkpoint_secs=1e9), checkpoints=saver)
    assert controller.run().final_step == 30
    assert saver.saved == [10, 20, 30]  # the measured interval (huge here) leaves only the epochs' ends
    saver = Saver()
    controller, _, _ = _controller(LoopSettings(0, 30, 10, checkpoint_secs=1e-9), checkpoints=saver)
    controller.run()
    assert saver.saved == list(range(6, 31))  # measured after 1 + 5 steps: then every step


def test_a_resume_starts_mid_epoch_and_the_restored_step_is_not_saved_again():
    saver, meter = Saver(), Meter()
    controller, runner, _ = _controller(LoopSettings(6, 8, 4, checkpoint_every=2), checkpoints=saver, meter=meter)
    assert controller.train() == 8
    assert runner.calls == [(1, 6, 8)] and saver.saved == [8] and meter.resets == 0  # mid-epoch: counts kept


def test_train_until_stops_at_that_step_and_a_later_call_goes_on():
    saver = Saver()
    controller, runner, progress = _controller(LoopSettings(0, 10, 4, checkpoint_every=100), checkpoints=saver)
    assert controller.train(until=6) == 6 and not progress.closed
    assert controller.train(until=99) == 10 and progress.closed
    assert runner.calls == [(0, 0, 4), (1, 4, 6), (1, 6, 8), (2, 8, 10)] and saver.saved == [6, 10]


def test_without_collaborators_nothing_is_saved_scored_or_exported():
    controller, _, progress = _controller(LoopSettings(0, 3, 3))
    assert controller.run() == RunResult(3, {}, None) and progress.closed


def test_a_job_already_at_its_last_step_trains_nothing():
    saver = Saver()
    controller, runner, _ = _controller(LoopSettings(5, 5, 5), checkpoints=saver, evaluator=Scorer())
    assert controller.run().scores["eval_loss"] == 0.5 and runner.calls == [] and saver.saved == [5]


@pytest.mark.parametrize("kwargs", [dict(start_step=4, total_steps=3, steps_per_epoch=1),
                                    dict(start_step=0, total_steps=3, steps_per_epoch=0),
                                    dict(start_step=0, total_steps=3, steps_per_epoch=1, checkpoint_every=-1)])
def test_settings_that_cannot_work_are_refused(kwargs):
    with pytest.raises(ValueError):
        LoopSettings(**kwargs)


def test_the_controller_takes_keywords_only():
    with pytest.raises(TypeError):
        Controller(Runner(), LoopSettings(0, 1, 1), Progress())  # type: ignore[misc]


def test_importing_the_controller_does_not_import_tensorflow():
    code = "import sys, trainer.controller; assert 'tensorflow' not in sys.modules, 'tensorflow imported'"
    subprocess.run([sys.executable, "-c", code], check=True)
