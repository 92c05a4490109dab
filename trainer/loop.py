"""``--loop custom``: the replica step under ``strategy.run`` and the runner that times it.

The replica step only computes and applies gradients; ``CustomRunner`` feeds it, times the input
wait and counts what reached each replica; ``trainer.controller`` owns everything between steps.
"""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from typing import Any

import keras
import tensorflow as tf

from trainer.idlog import IdLog
from trainer.metrics import Meter
from trainer.objective import Objective, objective_for

__all__ = ["CustomRunner", "StepResult", "make_train_step", "timed_step"]

StepFn = Callable[[Any], tuple[tf.Tensor, Any, Any]]
OnStep = Callable[[int, float], None]  # trainer.controller.OnStep


def _agree_on_overflow(grads: list[tf.Tensor], num_replicas: int) -> list[tf.Tensor]:
    """Makes every replica see non-finite gradients if any replica does.

    The loss-scale optimizer decides from its *local* gradients whether to skip a step; replicas
    that disagreed would enter different collectives and hang. One scalar all-reduce settles it.
    """
    finite = tf.cast(tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in grads if g is not None]), tf.float32)
    all_finite = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, finite) >= num_replicas
    return [g if g is None else tf.where(all_finite, g, tf.fill(tf.shape(g), tf.constant(float("nan"), g.dtype))) for g in grads]


def make_train_step(
    *,
    strategy: tf.distribute.Strategy,
    model: keras.Model,
    optimizer: keras.optimizers.Optimizer,
    global_batch: int,
    loss_scale: bool,
    objective: Objective | None = None,
    classification: bool = True,
) -> StepFn:
    """A ``tf.function`` taking one distributed batch; returns (global mean loss, per-replica
    example counts, per-replica ``{name: (correct, scored)}`` of the objective's accuracies).

    ``objective`` None: cross-entropy (``classification``) or squared error."""
    num_replicas = strategy.num_replicas_in_sync
    objective = objective or objective_for(classification)

    def replica_step(features: dict[str, tf.Tensor], labels: Any) -> tuple[tf.Tensor, tf.Tensor, Any]:
        with tf.GradientTape() as tape:
            outputs = model(features, training=True)
            per_example = objective.loss(labels, outputs)
            # The optimizer all-reduces gradients with SUM over the R replicas. Replica r holds
            # B = G / R examples; dividing the *sum* of its per-example losses by the *global*
            # batch G makes that sum  sum_r grad(sum_{i in r} l_i / G) = grad((1/G) sum_i l_i),
            # the gradient of the mean loss over the global batch. (Dividing by the local B would
            # scale every update by R.) A replica that got fewer examples simply contributes less.
            loss = tf.reduce_sum(per_example) / global_batch
            if model.losses:
                # Regularization belongs to the model, not to examples: 1/R of it on each replica.
                loss += tf.add_n(model.losses) / num_replicas
            scaled = optimizer.scale_loss(loss) if loss_scale else loss
        grads = tape.gradient(scaled, model.trainable_variables)
        if loss_scale:
            grads = _agree_on_overflow(grads, num_replicas)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        counts = objective.counts(labels, outputs)
        return loss, objective.examples(labels), {n: (counts[2 * i], counts[2 * i + 1]) for i, n in enumerate(objective.names)}

    @tf.function
    def train_step(batch: Any) -> tuple[tf.Tensor, Any, Any]:
        features, labels = batch
        loss, examples, correct = strategy.run(replica_step, args=(features, labels))
        # Each replica's loss is its share of the global mean, so their sum is the global mean loss.
        return strategy.reduce(tf.distribute.ReduceOp.SUM, loss, axis=None), examples, correct

    return train_step


@dataclasses.dataclass(frozen=True)
class StepResult:
    loss: float
    ids: list[int] | None  # the records' ids, when the batch carries them (--debug-record-ids)


def timed_step(
    strategy: tf.distribute.Strategy,
    step_fn: StepFn,
    iterator: Iterator[Any],
    meter: Meter,
    count: bool = True,
    *,
    probe: Iterator[Any] | None = None,
    with_ids: bool = False,
) -> StepResult | None:
    """Runs one step; returns its loss, or None when a finite iterator is exhausted.

    ``count``: read the step's accuracy counts back from the replicas into ``meter``.

    The timings are host wall time: ``float(loss)`` returns once the step function, all-reduce and
    update included, has finished, so the next ``next()`` starts with nothing of this step pending.
    ``probe``: time one ``next()`` of the in-memory floor probe first, as the real one would be.
    """
    floor = None
    if probe is not None:
        mark = time.perf_counter()
        next(probe)
        floor = time.perf_counter() - mark
    start = time.perf_counter()
    try:
        batch = next(iterator)
    except (StopIteration, tf.errors.OutOfRangeError):
        return None
    got = time.perf_counter()
    ids = None
    if with_ids:
        features, labels, ids = batch
        batch = (features, labels)
    loss_t, examples, correct = step_fn(batch)
    loss = float(loss_t)  # waits for the step (and its all-reduce) to finish
    done = time.perf_counter()
    counts = [int(n) for n in strategy.experimental_local_results(examples)]
    scores = {name: (_local_sum(strategy, c), _local_sum(strategy, n)) for name, (c, n) in correct.items()} if count else None
    meter.record(wait_s=got - start, step_s=done - start, loss=loss, replica_examples=counts, scores=scores, floor_s=floor)
    if ids is not None:
        ids = [int(i) for t in strategy.experimental_local_results(ids) for i in t.numpy()]
    return StepResult(loss, ids)


def _local_sum(strategy: tf.distribute.Strategy, value: Any) -> float:
    return sum(float(v) for v in strategy.experimental_local_results(value))


class CustomRunner:
    """Steps of the custom loop over one endless distributed input, opened at the first step run.

    ``batches(start_step)`` is the distributed input from that step on; with ``id_log`` its batches
    carry record ids as a third element. ``probe`` (``data.floor_probe``) is timed before every
    ``probe_every``-th step of this process.
    """

    def __init__(self, *, strategy: tf.distribute.Strategy, step_fn: StepFn, batches: Callable[[int], Any],
                 meter: Meter, count: bool = True, probe: Iterator[Any] | None = None, probe_every: int = 10,
                 id_log: IdLog | None = None) -> None:
        self.strategy, self.step_fn, self.batches, self.meter = strategy, step_fn, batches, meter
        self.count, self.probe, self.probe_every, self.id_log = count, probe, probe_every, id_log
        self._iterator: Iterator[Any] | None = None

    def run_epoch(self, *, epoch: int, start: int, stop: int, on_step: OnStep) -> int:
        if self._iterator is None:
            self._iterator = iter(self.batches(start))
        for step in range(start, stop):
            due = self.probe is not None and self.meter.steps > 0 and self.meter.steps % self.probe_every == 0
            result = timed_step(
                self.strategy, self.step_fn, self._iterator, self.meter, self.count,
                probe=self.probe if due else None, with_ids=self.id_log is not None,
            )
            if result is None:
                raise RuntimeError(f"input ended at step {step} before the planned {stop}")
            if self.id_log is not None and result.ids is not None:
                self.id_log.write(step=step, epoch=epoch, ids=result.ids)
            on_step(step + 1, result.loss)
        return stop

    def close(self) -> None:
        if self.id_log is not None:
            self.id_log.close()
