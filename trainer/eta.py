"""How long a training run will take, said early: the planned steps before the first step, an ETA
from the first steps timed, and a warning when a run without a GPU would take longer than
``CPU_WARN_SECONDS``, naming the flags that shorten it.

Pure and TF-free but for ``StepClock``, which reads a clock and logs (on the chief): the
controller calls its ``on_step`` after every finished step. The first step of a process is kept
out of the measurement (tracing, warm-up); the next ``TIMED_STEPS`` are timed. Also
``eval_batches_cap``: how many batches each worker scores of ``--eval-split`` under ``--eval-records``.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable

__all__ = [
    "CPU_WARN_SECONDS", "TIMED_STEPS", "StepClock", "cpu_warning", "eta_line", "eval_batches_cap", "format_duration",
    "plan_line", "steps_within",
]

log = logging.getLogger(__name__)

TIMED_STEPS = 5  # steps timed after the first for the ETA
CPU_WARN_SECONDS = 3600.0  # a run without a GPU longer than this is warned about before it is under way
SHORT_RUN_SECONDS = 600.0  # what the warning's suggested step count aims at


def format_duration(seconds: float) -> str:
    """``45 s``, ``12 min 5 s``, ``2 h 13 min``: whole units, the two largest."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"


def plan_line(*, start_step: int, total_steps: int, steps_per_epoch: int, global_batch: int) -> str:
    """The steps planned, as logged before the first step."""
    epochs = -(-total_steps // max(1, steps_per_epoch))
    left = total_steps - start_step
    where = f"from step {start_step:,} ({left:,} to go)" if start_step else "from the start"
    return (f"planned: {total_steps:,} steps ({epochs} epoch(s) x {steps_per_epoch:,} steps, global batch "
            f"{global_batch:,}) {where}; the ETA follows after {1 + TIMED_STEPS} steps")


def steps_within(seconds: float, seconds_per_step: float) -> int:
    """Steps that fit in ``seconds`` at ``seconds_per_step`` (at least 1)."""
    return max(1, int(seconds / max(seconds_per_step, 1e-9)))


def eta_line(*, steps_left: int, seconds_per_step: float) -> str:
    """The ETA of ``steps_left`` steps at the measured ``seconds_per_step``."""
    return (f"about {seconds_per_step:.3g} s a step (timed over {TIMED_STEPS} steps): {steps_left:,} steps left, "
            f"ETA {format_duration(steps_left * seconds_per_step)}")


def cpu_warning(*, steps_left: int, seconds_per_step: float, on_cpu: bool,
                limit_s: float = CPU_WARN_SECONDS) -> str | None:
    """The warning for a run without a GPU whose steps left take longer than ``limit_s``; None otherwise.
    It names the flags that shorten the run and the step count that ends in about ``SHORT_RUN_SECONDS``."""
    seconds = steps_left * seconds_per_step
    if not on_cpu or seconds <= limit_s:
        return None
    short = steps_within(SHORT_RUN_SECONDS, seconds_per_step)
    return (f"no GPU is visible and this run would take about {format_duration(seconds)} "
            f"({steps_left:,} steps at {seconds_per_step:.3g} s): shorten it with --steps-per-epoch N and --epochs N "
            f"(e.g. --epochs 1 --steps-per-epoch {short:,}: about {format_duration(short * seconds_per_step)}), a "
            f"smaller --per-replica-batch, or a smaller model; or run where a GPU is visible")


def eval_batches_cap(max_records: int | None, *, workers: int, batch_size: int) -> int | None:
    """Batches each worker scores for ``max_records`` records at most in all (None: every record)."""
    if max_records is None:
        return None
    per_worker = -(-max_records // max(1, workers))
    return max(1, -(-per_worker // max(1, batch_size)))


class StepClock:
    """Times steps ``start_step + 2`` .. ``start_step + 1 + TIMED_STEPS`` and then logs the ETA (and the CPU
    warning) once, when ``enabled`` (the chief). ``on_step(step)``: global step ``step`` just finished."""

    def __init__(self, *, start_step: int, total_steps: int, on_cpu: bool, enabled: bool = True,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.start_step, self.total_steps, self.on_cpu, self.enabled = start_step, total_steps, on_cpu, enabled
        self.clock = clock
        self._started: float | None = None
        self.seconds_per_step: float | None = None  # once measured

    def on_step(self, step: int) -> None:
        if not self.enabled or self.seconds_per_step is not None:
            return
        done = step - self.start_step
        if done == 1:
            self._started = self.clock()
        elif done == 1 + TIMED_STEPS and self._started is not None:
            self.seconds_per_step = (self.clock() - self._started) / TIMED_STEPS
            left = self.total_steps - step
            log.info("%s", eta_line(steps_left=left, seconds_per_step=self.seconds_per_step))
            warning = cpu_warning(steps_left=left, seconds_per_step=self.seconds_per_step, on_cpu=self.on_cpu)
            if warning:
                log.warning("%s", warning)
