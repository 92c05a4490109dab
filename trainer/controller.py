"""The outer training loop, written once (as Orbit's controller): epochs, checkpoints, progress
lines, then evaluation and the final export.

``Controller`` is given its collaborators, each a small protocol, and knows nothing else of the job:

- a ``StepRunner`` runs steps: the custom loop's ``strategy.run`` step (``trainer.loop.CustomRunner``)
  or Keras ``fit`` (``trainer.fit.FitRunner``); it reports each finished step through ``on_step`` and
  the controller decides what happens between steps;
- ``CheckpointSaver`` (``trainer.checkpoints.Checkpoints``) saves at a global step; restoring is
  done before the controller is built (its step is ``LoopSettings.start_step``);
- an ``Evaluator`` scores the model after training (``trainer.collaborators.SplitEvaluator``:
  ``--eval-split``); an ``Exporter`` writes the final model (``trainer.collaborators.ModelExporter``);
- ``Progress`` (``trainer.metrics``) prints the progress lines and TensorBoard scalars;
- ``eta`` (``trainer.eta.StepClock``), told of every finished step, logs the ETA after the first steps.

Importing this module does not import TensorFlow (the time-based checkpoint interval is agreed
through ``strategy`` with one all-gather, imported when it runs).
"""
from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, runtime_checkable

if TYPE_CHECKING:
    from trainer.eta import StepClock
    from trainer.metrics import Meter, Progress

__all__ = [
    "CheckpointSaver", "Controller", "Evaluator", "Exporter", "LoopSettings", "OnStep", "RunResult", "StepRunner",
]

log = logging.getLogger(__name__)
_CALIBRATION_STEPS = 5  # steps timed to size the time-based checkpoint interval

OnStep = Callable[[int, float], None]  # (global step just finished, 1-based; its loss)


@runtime_checkable
class StepRunner(Protocol):
    """Runs the steps of one epoch (or the rest of one) and reports each to the controller."""

    def run_epoch(self, *, epoch: int, start: int, stop: int, on_step: OnStep) -> int:
        """Runs global steps ``start`` .. ``stop - 1`` of ``epoch``; returns the step reached."""
        ...


@runtime_checkable
class CheckpointSaver(Protocol):
    """Saves the training state at a global step (every worker calls it: saving may be a collective)."""

    def save(self, step: int) -> None:
        """Saves at ``step``; a step already saved (or restored) is not saved again."""
        ...

    def close(self) -> None:
        """Releases what saving held (a non-chief worker's temporary folder)."""
        ...


@runtime_checkable
class Evaluator(Protocol):
    """Scores the model as it is at global step ``step``; every worker calls it (it may be a collective)."""

    def evaluate(self, step: int) -> dict[str, Any]:
        """The scores, named as the job summary reports them (``eval_loss``, ``eval_accuracy``, ...)."""
        ...


@runtime_checkable
class Exporter(Protocol):
    """Writes the trained model; every worker calls it (saving may read synchronized variables)."""

    def export(self, step: int) -> str | None:
        """The exported model's URL on the chief; None on the other workers, or when nothing is exported."""
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
    """Trains with ``runner``, saving through ``checkpoints``; then ``evaluator`` and ``exporter``.

    Every collaborator but ``runner``, ``settings`` and ``progress`` is optional: ``checkpoints`` None
    saves nothing (baselines), ``evaluator`` None scores nothing, ``exporter`` None exports nothing.
    ``meter`` (the runner's ``trainer.metrics.Meter``) has its accuracy counts reset at every epoch's
    start, so that they cover the last epoch. ``strategy`` (a ``tf.distribute.Strategy``) agrees the
    time-based checkpoint interval across the workers; None: this process's own step time.
    """

    def __init__(self, *, runner: StepRunner, settings: LoopSettings, progress: Progress,
                 checkpoints: CheckpointSaver | None = None, evaluator: Evaluator | None = None,
                 exporter: Exporter | None = None, meter: Meter | None = None, strategy: Any = None,
                 eta: StepClock | None = None) -> None:
        self.runner, self.settings, self.progress, self.eta = runner, settings, progress, eta
        self.checkpoints, self.evaluator, self.exporter = checkpoints, evaluator, exporter
        self.meter, self.strategy = meter, strategy
        self.step = settings.start_step  # the global step reached
        self._epoch = 0
        self._every = settings.checkpoint_every or None  # time-based: set once the step time is measured
        self._clock: float | None = None

    def _slowest_ms(self, ms: int) -> int:
        if self.strategy is None:
            return ms
        from trainer.checkpoints import gather_ints

        return max(gather_ints(self.strategy, ms))

    def _timed_every(self, step: int) -> int | None:
        """Steps between time-based checkpoints, the same on every worker: from the slowest worker's
        time for ``_CALIBRATION_STEPS`` steps (one all-gather, at the same step everywhere)."""
        done = step - self.settings.start_step
        if done == 1:  # after the first step's tracing
            self._clock = time.monotonic()
        elif done == 1 + _CALIBRATION_STEPS and self._clock is not None:
            slowest_ms = self._slowest_ms(int(1000 * (time.monotonic() - self._clock)))
            per_step = max(slowest_ms, 1) / 1000 / _CALIBRATION_STEPS
            self._every = max(1, int(self.settings.checkpoint_secs / per_step))
            log.info("checkpoints every %d steps (about %.0f s at %.3f s a step) and at every epoch's end",
                     self._every, self.settings.checkpoint_secs, per_step)
        return self._every

    def _on_step(self, step: int, loss: float) -> None:
        s = self.settings
        self.step = step
        self.progress.update(step=step, epoch=self._epoch, loss=loss, force=step % s.steps_per_epoch == 0)
        if self.eta is not None:
            self.eta.on_step(step)
        if self.checkpoints is None:
            return
        every = s.checkpoint_every or self._timed_every(step)
        if (every and step % every == 0) or (not s.checkpoint_every and step % s.steps_per_epoch == 0):
            self.checkpoints.save(step)

    def train(self, *, until: int | None = None) -> int:
        """Trains epoch by epoch up to global step ``until`` (default and at most ``total_steps``) and saves
        a checkpoint there; returns the step reached. The progress lines end with the last step."""
        s = self.settings
        until = s.total_steps if until is None else min(until, s.total_steps)
        while self.step < until:
            self._epoch = self.step // s.steps_per_epoch
            stop = min(until, (self._epoch + 1) * s.steps_per_epoch)
            if self.step % s.steps_per_epoch == 0 and self.meter is not None:
                self.meter.reset_accuracy()  # accuracy is reported over the last epoch
            self.step = self.runner.run_epoch(epoch=self._epoch, start=self.step, stop=stop, on_step=self._on_step)
        if self.checkpoints is not None:
            self.checkpoints.save(self.step)
        if self.step == s.total_steps:
            self.progress.close()
        return self.step

    def evaluate(self) -> dict[str, Any]:
        """The evaluator's scores at the step reached; ``{}`` without an evaluator."""
        return {} if self.evaluator is None else dict(self.evaluator.evaluate(self.step))

    def export(self) -> str | None:
        """The exporter's URL for the model at the step reached; None without an exporter."""
        return None if self.exporter is None else self.exporter.export(self.step)

    def run(self) -> RunResult:
        """``train`` to the end, ``evaluate``, ``export`` (every worker takes part), then the checkpoints closed."""
        final_step = self.train()
        scores = self.evaluate()
        exported = self.export()
        if self.checkpoints is not None:
            self.checkpoints.close()
        return RunResult(final_step, scores, exported)
