"""``--loop fit``: the same input, checkpoints and summary through Keras ``Model.fit``.

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

from trainer.checkpoints import Checkpoints
from trainer.loop import LoopSettings, per_example_loss
from trainer.metrics import Meter, Progress

__all__ = ["ReplicaCounts", "run_fit"]


class ReplicaCounts(keras.metrics.Metric):
    """Per replica: examples received, replica-steps, and replica-steps with no example."""

    def __init__(self, name: str = "replica_counts", **kwargs: Any) -> None:
        super().__init__(name=name, **kwargs)
        self.examples = self.add_variable(shape=(), initializer="zeros", dtype="int64", name="examples")
        self.steps = self.add_variable(shape=(), initializer="zeros", dtype="int64", name="steps")
        self.empty = self.add_variable(shape=(), initializer="zeros", dtype="int64", name="empty")

    def update_state(self, y_true: tf.Tensor, y_pred: tf.Tensor, sample_weight: tf.Tensor | None = None) -> None:
        n = tf.cast(tf.shape(y_true)[0], tf.int64)
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


class _Hooks(keras.callbacks.Callback):
    def __init__(self, *, base_step: int, epoch: int, settings: LoopSettings, meter: Meter,
                 progress: Progress, checkpoints: Checkpoints | None) -> None:
        super().__init__()
        self.base, self.epoch, self.s = base_step, epoch, settings
        self.meter, self.progress, self.checkpoints = meter, progress, checkpoints
        self.mark = 0.0

    def on_train_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self.mark = time.perf_counter()

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        loss = float((logs or {}).get("loss", float("nan")))
        self.meter.record(wait_s=None, step_s=time.perf_counter() - self.mark, loss=loss, replica_examples=None)
        step = self.base + batch + 1
        self.progress.update(step=step, epoch=self.epoch, loss=loss, force=step % self.s.steps_per_epoch == 0)
        if self.checkpoints is not None and self.s.checkpoint_every and step % self.s.checkpoint_every == 0:
            self.checkpoints.save(step)


def _keras_multi_worker_shims(model: keras.Model, strategy: tf.distribute.Strategy, batch_spec: Any) -> None:
    """Works around two Keras 3 bugs that stop ``fit`` under a multi-worker MWMS
    (keras-team/keras#20585, tensorflow/tensorflow#72388); harmless on one worker.

    1. ``fit`` builds the compiled loss and metrics from a first batch merged with
       ``strategy.reduce``, which MWMS refuses for a dict of per-replica values: build them from the
       batch spec instead, so that step has nothing to do.
    2. ``fit`` averages the per-replica step logs (scalars) with ``strategy.reduce(..., axis=0)``,
       which fails on 0-d tensors: average them with ``axis=None``.
    """
    from keras.src.backend.tensorflow import trainer as tf_trainer

    with strategy.scope():
        model._symbolic_build(data_batch=batch_spec)
    model._maybe_symbolic_build = lambda iterator=None, data_batch=None: None
    original = tf_trainer.reduce_per_replica
    if getattr(original, "patched_by_trainer", False):
        return

    def reduce_per_replica(values: Any, strategy: Any, reduction: str) -> Any:
        if reduction == "auto" and tf_trainer._collective_all_reduce_multi_worker(strategy):
            return tf.nest.map_structure(lambda v: strategy.reduce("MEAN", v, axis=None), values)
        return original(values, strategy, reduction)

    reduce_per_replica.patched_by_trainer = True  # type: ignore[attr-defined]
    tf_trainer.reduce_per_replica = reduce_per_replica


def run_fit(
    *,
    strategy: tf.distribute.Strategy,
    model: keras.Model,
    optimizer: keras.optimizers.Optimizer,
    batches: Callable[[int], Any],
    batch_spec: Any,
    settings: LoopSettings,
    meter: Meter,
    progress: Progress,
    checkpoints: Checkpoints | None,
) -> int:
    """Trains with ``Model.fit``, one call per epoch so a resumed epoch runs only its remaining steps.

    ``batch_spec`` is the (features, label) spec of one per-replica batch.
    """
    s = settings
    classification = s.classification

    def loss_fn(labels: tf.Tensor, outputs: tf.Tensor) -> tf.Tensor:
        return per_example_loss(labels, outputs, classification=classification)

    counts = ReplicaCounts()
    metrics: list[Any] = [counts]
    if classification:
        metrics.append(keras.metrics.SparseCategoricalAccuracy(name="accuracy"))
    with strategy.scope():
        model.compile(optimizer=optimizer, loss=loss_fn, metrics=metrics)
    _keras_multi_worker_shims(model, strategy, batch_spec)
    step = s.start_step
    while step < s.total_steps:
        epoch, done = divmod(step, s.steps_per_epoch)
        remaining = s.steps_per_epoch - done
        hooks = _Hooks(base_step=step, epoch=epoch, settings=s, meter=meter, progress=progress, checkpoints=checkpoints)
        history = model.fit(batches(step), epochs=1, steps_per_epoch=remaining, callbacks=[hooks], verbose=0, shuffle=False)
        examples, replica_steps, empty = counts.local_totals(strategy)
        meter.add_counts(examples=examples, replica_steps=replica_steps, empty=empty)
        # Keras's accuracy metric, as fit reports it for the last epoch run.
        meter.accuracy = history.history.get("accuracy", [None])[-1]
        step += remaining
    if checkpoints is not None:
        checkpoints.save(step)
    return step
