"""``--loop fit``: the same input, controller, checkpoints and summary through Keras ``Model.fit``.

Keras runs the step inside its own function, so the time blocked on input cannot be told apart
from compute (``input_wait_fraction`` is reported as null); examples and empty replica-steps are
counted by a metric that every replica updates from the labels that reached it.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import keras
import tensorflow as tf

from trainer import keras_compat
from trainer.loop import OnStep
from trainer.metrics import Meter
from trainer.objective import Objective

__all__ = ["FitRunner", "ObjectiveAccuracy", "ReplicaCounts"]


class ReplicaCounts(keras.metrics.Metric):
    """Per replica: examples received, replica-steps, and replica-steps with no example."""

    def __init__(self, objective: Objective, name: str = "replica_counts", **kwargs: Any) -> None:
        super().__init__(name=name, **kwargs)
        self.objective = objective
        self.examples = self.add_variable(shape=(), initializer="zeros", dtype="int64", name="examples")
        self.steps = self.add_variable(shape=(), initializer="zeros", dtype="int64", name="steps")
        self.empty = self.add_variable(shape=(), initializer="zeros", dtype="int64", name="empty")

    def update_state(self, y_true: tf.Tensor, y_pred: tf.Tensor, sample_weight: tf.Tensor | None = None) -> None:
        n = tf.cast(self.objective.examples(y_true), tf.int64)
        self.examples.assign_add(n)
        self.steps.assign_add(1)
        self.empty.assign_add(tf.cast(tf.equal(n, 0), tf.int64))

    def result(self) -> tf.Tensor:
        return tf.cast(self.examples, "float32")

    def local_totals(self, strategy: tf.distribute.Strategy) -> tuple[int, int, int]:
        """(examples, replica-steps, empty replica-steps) of this worker's replicas only."""

        def local(v: Any) -> int:
            return sum(int(x) for x in strategy.experimental_local_results(v.value))

        return local(self.examples), local(self.steps), local(self.empty)


class ObjectiveAccuracy(keras.metrics.Metric):
    """One of the objective's accuracies (``Objective.names[index]``), from its (correct, scored) counts."""

    def __init__(self, objective: Objective, index: int, **kwargs: Any) -> None:
        super().__init__(name=objective.names[index], **kwargs)
        self.objective, self.index = objective, index
        self.correct = self.add_variable(shape=(), initializer="zeros", dtype="float32", name="correct")
        self.scored = self.add_variable(shape=(), initializer="zeros", dtype="float32", name="scored")

    def update_state(self, y_true: Any, y_pred: Any, sample_weight: tf.Tensor | None = None) -> None:
        counts = self.objective.counts(y_true, y_pred)
        self.correct.assign_add(counts[2 * self.index])
        self.scored.assign_add(counts[2 * self.index + 1])

    def result(self) -> tf.Tensor:
        return tf.math.divide_no_nan(self.correct, self.scored)


class _StepHook(keras.callbacks.Callback):
    """Times each step of ``fit`` and hands it to the controller, as the custom runner does."""

    def __init__(self, *, base_step: int, meter: Meter, on_step: OnStep) -> None:
        super().__init__()
        self.base, self.meter, self.on_step = base_step, meter, on_step
        self.mark = 0.0

    def on_train_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self.mark = time.perf_counter()

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        loss = float((logs or {}).get("loss", float("nan")))
        self.meter.record(wait_s=None, step_s=time.perf_counter() - self.mark, loss=loss, replica_examples=None)
        self.on_step(self.base + batch + 1, loss)


def _score_outputs_together(model: keras.Model, objective: Objective, metrics: list[Any]) -> None:
    """``compile`` gives each output of a dict its own loss and metrics; an objective that scores the outputs
    together (BERT's masked-LM and next-sentence heads against a dict of targets) replaces the model's
    ``compute_loss`` and ``compute_metrics``, the two methods Keras documents for this. The loss is the mean
    over the replica's batch divided by the replica count, as Keras scales its own losses, so that the summed
    gradients are those of the global batch's mean."""

    def compute_loss(x: Any = None, y: Any = None, y_pred: Any = None, sample_weight: Any = None,
                     training: bool = True) -> tf.Tensor:
        loss = tf.reduce_mean(objective.loss(y, y_pred))
        if model.losses:
            loss += tf.add_n(model.losses)
        context = tf.distribute.get_replica_context()
        return loss / (context.num_replicas_in_sync if context is not None else 1)

    def compute_metrics(x: Any, y: Any, y_pred: Any, sample_weight: Any = None) -> dict[str, Any]:
        for metric in metrics:
            metric.update_state(y, y_pred)
        return model.get_metrics_result()

    model.objective_metrics = metrics  # tracked by Keras: reset at every epoch, listed in model.metrics
    model.compute_loss, model.compute_metrics = compute_loss, compute_metrics


class FitRunner:
    """One ``Model.fit`` call per epoch, so a resumed epoch runs only its remaining steps.

    ``batches(start_step)`` is the distributed input from that step on; ``batch_spec`` the
    (features, label) spec of one per-replica batch (see ``keras_compat``).
    """

    def __init__(self, *, strategy: tf.distribute.Strategy, model: keras.Model, optimizer: keras.optimizers.Optimizer,
                 batches: Callable[[int], Any], batch_spec: Any, meter: Meter, objective: Objective) -> None:
        self.strategy, self.model, self.batches, self.batch_spec, self.meter = strategy, model, batches, batch_spec, meter
        self.names = objective.names
        with strategy.scope():
            self.counts = ReplicaCounts(objective)
            metrics: list[Any] = [self.counts, *(ObjectiveAccuracy(objective, i) for i in range(len(objective.names)))]
            if isinstance(model.output, dict):
                _score_outputs_together(model, objective, metrics)
                model.compile(optimizer=optimizer)
            else:
                model.compile(optimizer=optimizer, loss=objective.loss, metrics=metrics)

    def run_epoch(self, *, epoch: int, start: int, stop: int, on_step: OnStep) -> int:
        hook = _StepHook(base_step=start, meter=self.meter, on_step=on_step)
        with keras_compat.multi_worker_fit(self.model, self.strategy, self.batch_spec):
            history = self.model.fit(
                self.batches(start), epochs=1, steps_per_epoch=stop - start, callbacks=[hook], verbose=0, shuffle=False
            )
        examples, replica_steps, empty = self.counts.local_totals(self.strategy)
        self.meter.add_counts(examples=examples, replica_steps=replica_steps, empty=empty)
        # The accuracies as fit reports them for the last epoch run.
        self.meter.fit_scores = {name: history.history[name][-1] for name in self.names if name in history.history}
        return stop

    def close(self) -> None:
        """Nothing to release (the same interface as ``CustomRunner``)."""
