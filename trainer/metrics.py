"""Per-worker measurements, progress lines, TensorBoard scalars and the end-of-run summary.

Everything is measured from what reached the step: ``empty_replica_steps`` counts replica-steps
whose batch held no example, ``input_wait_fraction`` is the time blocked on the next batch over the
whole step time. ``input_wait_floor_fraction`` is the same ``next()`` timed, every few steps, on an
in-memory batch through the same distributed iterator (``data.floor_probe``): the iterator's own
cost, which no input pipeline can hide. ``input_wait_fraction - input_wait_floor_fraction`` is what
the input pipeline itself costs. The first step of a process (tracing, warm-up) is kept out of the
timing means.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from shardprep import fs, naming

__all__ = ["Meter", "Progress", "summary_url", "write_summary"]

log = logging.getLogger(__name__)
ALLREDUCE_WARN_FRACTION = 0.2
ALLREDUCE_WARN_MIN_STEPS = 100  # timed steps before the communication-bound warning means something


@dataclasses.dataclass
class Meter:
    """Running totals of one worker's steps."""

    steps: int = 0
    examples: int = 0
    empty_replica_steps: int = 0
    replica_steps: int = 0
    wait_s: float = 0.0
    waited_steps: int = 0  # the steps whose wait is in wait_s, and their step time
    waited_busy_s: float = 0.0
    busy_s: float = 0.0
    timed_steps: int = 0
    floor_s: float = 0.0
    floor_probes: int = 0
    first_step_s: float | None = None
    first_loss: float | None = None
    final_loss: float | None = None
    # name -> [correct, scored] over the current epoch (trainer.objective: "accuracy", "masked_lm_accuracy", ...)
    scores: dict[str, list[float]] = dataclasses.field(default_factory=dict)
    fit_scores: dict[str, float] = dataclasses.field(default_factory=dict)  # the accuracies as Keras fit reports them

    def record(
        self,
        *,
        wait_s: float | None,
        step_s: float,
        loss: float,
        replica_examples: Sequence[int] | None,
        correct: int | None = None,
        scores: Mapping[str, tuple[float, float]] | None = None,
        floor_s: float | None = None,
    ) -> None:
        """One step: the time to get its batch and the whole step time (None: not measurable),
        and the examples each local replica received (None: counted elsewhere). ``floor_s``: the floor
        probe's ``next()``, timed just before this step's; that one then came warm and is left out.
        ``scores``: ``{name: (correct, scored)}`` of this step; ``correct``: the same for ``accuracy``
        over the step's examples."""
        self.steps += 1
        if replica_examples is not None:
            self.add_counts(
                examples=sum(replica_examples),
                replica_steps=len(replica_examples),
                empty=sum(1 for n in replica_examples if n == 0),
            )
            if correct is not None:
                scores = {"accuracy": (correct, sum(replica_examples))}
        for name, (right, scored) in (scores or {}).items():
            total = self.scores.setdefault(name, [0.0, 0.0])
            total[0] += right
            total[1] += scored
        if self.first_loss is None:
            self.first_loss = loss
        self.final_loss = loss
        if self.first_step_s is None:
            self.first_step_s = step_s
            return
        self.timed_steps += 1
        self.busy_s += step_s
        if floor_s is not None:
            self.floor_s += floor_s
            self.floor_probes += 1
        elif wait_s is not None:
            self.wait_s += wait_s
            self.waited_steps += 1
            self.waited_busy_s += step_s
        else:
            self.wait_s = float("nan")

    def add_counts(self, *, examples: int, replica_steps: int, empty: int) -> None:
        self.examples += examples
        self.replica_steps += replica_steps
        self.empty_replica_steps += empty

    def reset_accuracy(self) -> None:
        self.scores.clear()

    @property
    def step_time_mean_s(self) -> float | None:
        if self.timed_steps:
            return self.busy_s / self.timed_steps
        return self.first_step_s

    def summary(self, *, allreduce_s: float | None) -> dict[str, Any]:
        mean = self.step_time_mean_s
        wait = self.wait_s / self.waited_busy_s if self.waited_busy_s and self.wait_s == self.wait_s else None
        floor = self.floor_s / self.floor_probes if self.floor_probes else None
        total_s = self.busy_s + (self.first_step_s or 0.0)
        fraction = allreduce_s / mean if allreduce_s is not None and mean else None
        out: dict[str, Any] = {
            "steps": self.steps,
            "examples": self.examples,
            "empty_replica_steps": self.empty_replica_steps,
            "replica_steps": self.replica_steps,
            "input_wait_fraction": _round(wait),
            "input_wait_s": _round(self.wait_s / self.waited_steps if wait is not None else None, 6),
            "input_wait_floor_fraction": _round(floor / mean if floor is not None and mean else None),
            "input_wait_floor_s": _round(floor, 6),
            "step_time_mean_s": _round(mean, 6),
            "first_step_s": _round(self.first_step_s),
            "examples_per_second": _round(self.examples / total_s if total_s else None, 1),
            "first_loss": _round(self.first_loss, 6),
            "final_loss": _round(self.final_loss, 6),
            "allreduce_s": _round(allreduce_s, 6),
            "allreduce_fraction": _round(fraction),
        }
        for name, (right, scored) in sorted(self.scores.items()):
            if scored:
                out[name] = _round(right / scored)
        out.update({name: _round(value) for name, value in self.fit_scores.items()})
        # Only over enough timed steps: a short run's mean step time says too little to call it communication bound.
        if fraction is not None and fraction > ALLREDUCE_WARN_FRACTION and self.timed_steps >= ALLREDUCE_WARN_MIN_STEPS:
            log.warning(
                "all-reduce of the gradients takes %.0f%% of a step (%.2f ms of %.2f ms): communication "
                "bound; use a larger batch per replica or a faster interconnect",
                100 * fraction, 1e3 * allreduce_s, 1e3 * mean,  # type: ignore[operator]
            )
        return out


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(float(value), digits)


class Progress:
    """Progress lines (step, loss, examples/s, ETA) and TensorBoard scalars, on the chief only."""

    def __init__(self, *, enabled: bool, total_steps: int, global_batch: int, every: int, logdir: str | None) -> None:
        self.enabled, self.total, self.global_batch, self.every = enabled, total_steps, global_batch, every
        self.writer = None
        if enabled and logdir:
            import tensorflow as tf

            self.writer = tf.summary.create_file_writer(logdir)
        self._mark: tuple[float, int] | None = None

    def update(self, *, step: int, epoch: int, loss: float, force: bool = False) -> None:
        """Reports after global step ``step`` (1-based) if due."""
        if not self.enabled:
            return
        now = time.perf_counter()
        if self._mark is None:
            self._mark = (now, step)
        due = force or step == self.total or (self.every and step % self.every == 0)
        if not due:
            return
        t0, s0 = self._mark
        rate = (step - s0) / (now - t0) if now > t0 and step > s0 else None
        eta = f"{(self.total - step) / rate:.0f}s" if rate else "?"
        speed = f"{rate * self.global_batch:.0f}" if rate else "?"
        log.info("step %d/%d epoch %d loss %.4f examples/s %s ETA %s", step, self.total, epoch + 1, loss, speed, eta)
        if self.writer is not None:
            self._scalar("loss", loss, step)
            if rate:
                self._scalar("examples_per_second", rate * self.global_batch, step)
        self._mark = (now, step)

    def _scalar(self, tag: str, value: float, step: int) -> None:
        """A TensorBoard scalar through TF's core summary op (``tf.summary.scalar`` needs the
        tensorboard package, which the trainer does not require)."""
        import tensorflow as tf
        from tensorflow.core.framework import summary_pb2

        metadata = summary_pb2.SummaryMetadata(plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"))
        with self.writer.as_default(step=step):
            tf.summary.write(tag, tf.constant(value, tf.float32), metadata=metadata)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.flush()
            self.writer.close()


def summary_url(model_dir: str, worker: int) -> str:
    return naming.join(model_dir, f"summary/worker-{worker}.json")


def write_summary(model_dir: str, worker: int, doc: dict[str, Any]) -> str:
    """Writes ``model_dir/summary/worker-<i>.json`` atomically; returns its URL."""
    url = summary_url(model_dir, worker)
    with fs.write_atomic(url) as f:
        f.write(json.dumps(doc, indent=2, sort_keys=True).encode() + b"\n")
    return url
