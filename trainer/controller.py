"""The outer training loop, written once (as Orbit's controller): epochs, checkpoints, progress
lines, then evaluation and the final save and export.

It drives a ``StepRunner``, which only runs steps: the custom loop's ``strategy.run`` step
(``trainer.loop.CustomRunner``) or Keras ``fit`` (``trainer.fit.FitRunner``). The runner reports
each finished step through ``on_step``; the controller decides what happens between steps.
"""
from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

from trainer import labels, model_card, scoring
from trainer.checkpoints import Checkpoints, export_model, gather_ints
from trainer.metrics import Meter, Progress
from trainer.session import Session

__all__ = ["Controller", "LoopSettings", "OnStep", "RunResult", "StepRunner"]

log = logging.getLogger(__name__)
_CALIBRATION_STEPS = 5  # steps timed to size the time-based checkpoint interval

OnStep = Callable[[int, float], None]  # (global step just finished, 1-based; its loss)


class StepRunner(Protocol):
    """Runs the steps of one epoch (or the rest of one) and reports each to the controller."""

    def run_epoch(self, *, epoch: int, start: int, stop: int, on_step: OnStep) -> int:
        """Runs global steps ``start`` .. ``stop - 1`` of ``epoch``; returns the step reached."""
        ...


@dataclasses.dataclass(frozen=True)
class LoopSettings:
    """What the controller runs: ``total_steps`` from ``start_step``, ``steps_per_epoch`` each."""

    start_step: int
    total_steps: int
    steps_per_epoch: int
    checkpoint_every: int = 0  # 0: about every ``checkpoint_secs`` seconds and at every epoch's end
    checkpoint_secs: float = 60.0

    def __post_init__(self) -> None:
        if not 0 <= self.start_step <= self.total_steps:
            raise ValueError(f"start step {self.start_step} outside [0, {self.total_steps}]")
        if self.steps_per_epoch < 1 or self.checkpoint_every < 0:
            raise ValueError("steps_per_epoch must be >= 1 and checkpoint_every >= 0")


class RunResult(NamedTuple):
    """What a finished run leaves: the final global step, eval scores, the exported model's URL."""

    final_step: int
    scores: dict[str, Any]
    exported: str | None


class Controller:
    """Owns everything around the steps; ``checkpoints`` None: no checkpoints (baselines)."""

    def __init__(self, *, session: Session, settings: LoopSettings, meter: Meter, progress: Progress,
                 checkpoints: Checkpoints | None) -> None:
        self.session, self.settings, self.meter = session, settings, meter
        self.progress, self.checkpoints = progress, checkpoints
        self._epoch = 0
        self._every = settings.checkpoint_every or None  # time-based: set once the step time is measured
        self._clock: float | None = None

    def _timed_every(self, step: int) -> int | None:
        """Steps between time-based checkpoints, the same on every worker: from the slowest worker's
        time for ``_CALIBRATION_STEPS`` steps (one all-gather, at the same step everywhere)."""
        done = step - self.settings.start_step
        if done == 1:  # after the first step's tracing
            self._clock = time.monotonic()
        elif done == 1 + _CALIBRATION_STEPS and self._clock is not None:
            slowest_ms = max(gather_ints(self.session.strategy, int(1000 * (time.monotonic() - self._clock))))
            per_step = max(slowest_ms, 1) / 1000 / _CALIBRATION_STEPS
            self._every = max(1, int(self.settings.checkpoint_secs / per_step))
            log.info("checkpoints every %d steps (about %.0f s at %.3f s a step) and at every epoch's end",
                     self._every, self.settings.checkpoint_secs, per_step)
        return self._every

    def _on_step(self, step: int, loss: float) -> None:
        s = self.settings
        self.progress.update(step=step, epoch=self._epoch, loss=loss, force=step % s.steps_per_epoch == 0)
        if self.checkpoints is None:
            return
        every = s.checkpoint_every or self._timed_every(step)
        if (every and step % every == 0) or (not s.checkpoint_every and step % s.steps_per_epoch == 0):
            self.checkpoints.save(step)

    def train(self, runner: StepRunner) -> int:
        """Trains from ``start_step`` to ``total_steps``, epoch by epoch; returns the final step."""
        s = self.settings
        step = s.start_step
        while step < s.total_steps:
            self._epoch = step // s.steps_per_epoch
            stop = min(s.total_steps, (self._epoch + 1) * s.steps_per_epoch)
            if step % s.steps_per_epoch == 0:
                self.meter.reset_accuracy()  # accuracy is reported over the last epoch
            step = runner.run_epoch(epoch=self._epoch, start=step, stop=stop, on_step=self._on_step)
        if self.checkpoints is not None:
            self.checkpoints.save(step)
        self.progress.close()
        return step

    def run(self, runner: StepRunner) -> RunResult:
        """``train``, then ``--eval-split`` scores and the export (every worker takes part)."""
        final_step = self.train(runner)
        ses = self.session
        scores: dict[str, Any] = {}
        if ses.eval_plan is not None:
            scores = scoring.evaluate(
                ses.strategy, ses.model, ses.eval_plan, worker=ses.worker, batch_size=ses.plan.per_worker_batch,
                classification=ses.classification, train_mean=ses.plan.statistics.get(ses.config.label, {}).get("mean"),
                objective=ses.objective,
            )
        exported = export_model(
            ses.model, model_dir=ses.config.model_dir, is_chief=ses.cluster.is_chief, worker_index=ses.worker,
            fmt=ses.config.export,
        )
        if exported and ses.plan.label_vocabulary:  # the exported model outputs ids: their string values beside it
            labels.write_vocabulary(exported, ses.config.label, ses.plan.label_vocabulary)
        if exported and ses.cluster.is_chief:  # what trainer.evaluate needs to score another data set
            model_card.write_card(ses.config.model_dir, model_card.card_of(ses.config, ses.plan, exported))
        if ses.plan.label_vocabulary:
            scores["label_vocabulary"] = list(ses.plan.label_vocabulary)
        if self.checkpoints is not None:
            self.checkpoints.close()
        return RunResult(final_step, scores, exported)
