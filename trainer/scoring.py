"""Loss and accuracy of a model on a split: ``--eval-split`` and ``trainer.evaluate``.

Each worker scores its own records of the split (the same planning as training, but nothing is
dropped: the last batch may be partial) with no collective per batch, so the workers may hold
different numbers of records; one all-reduce then adds up their sums. ``max_batches`` stops each
worker after its first that many batches (``--eval-records``, ``trainer.eta.eval_batches_cap``);
None scores every record once.
"""
from __future__ import annotations

import itertools
import logging
from typing import Any

import keras
import tensorflow as tf

from trainer import data
from trainer.objective import Objective, per_example_loss
from trainer.preflight import InputPlan

__all__ = ["evaluate"]

log = logging.getLogger(__name__)


def _all_sum(strategy: tf.distribute.Strategy, values: list[float]) -> list[float]:
    """``values`` summed over the workers (one all-reduce; each worker's first replica contributes)."""

    def replica_fn() -> tf.Tensor:
        context = tf.distribute.get_replica_context()
        mine = tf.constant(values, tf.float64) * tf.cast(tf.equal(context.replica_id_in_sync_group % _local(strategy), 0), tf.float64)
        return context.all_reduce(tf.distribute.ReduceOp.SUM, mine)

    result = strategy.run(tf.function(replica_fn))
    return [float(v) for v in strategy.experimental_local_results(result)[0].numpy()]


def _local(strategy: tf.distribute.Strategy) -> int:
    return len(strategy.extended.worker_devices)


def evaluate(
    strategy: tf.distribute.Strategy,
    model: keras.Model,
    plan: InputPlan,
    *,
    worker: int,
    batch_size: int,
    classification: bool,
    train_mean: float | None = None,
    objective: Objective | None = None,
    label_map: tuple[int, ...] | None = None,
    max_batches: int | None = None,
) -> dict[str, Any]:
    """Scores ``worker``'s records of ``plan``; returns the totals over all workers.

    ``label_map`` (another data set's class ids, ``trainer.labels.map_by_name``): the data set's id ``i``
    is the model's id ``label_map[i]``; None: the ids are the model's.

    Classification: a label training never saw (``trainer.data`` makes it -1) is counted in
    ``eval_unseen_labels`` and left out of loss and accuracy. Regression: ``eval_mse`` and
    ``eval_baseline_mse``, the error of always predicting ``train_mean`` (the training split's mean from
    the manifest's statistics) or, without statistics, the eval split's own mean (a stricter baseline).
    """
    if plan.targets and objective is not None:  # a dict of targets (BERT pre-training): the objective scores them
        return _evaluate_objective(strategy, model, plan, worker=worker, batch_size=batch_size, objective=objective,
                                   max_batches=max_batches)
    center = 0.0 if train_mean is None else float(train_mean)
    remap = None if label_map is None else tf.constant(label_map, tf.int64)

    @tf.function
    def score(features: dict[str, tf.Tensor], labels: tf.Tensor) -> tuple[tf.Tensor, ...]:
        outputs = model(features, training=False)
        if classification:
            if remap is not None:  # -1 (a value training never saw) stays -1
                labels = tf.where(labels >= 0, tf.gather(remap, tf.maximum(tf.cast(labels, tf.int64), 0)), -1)
            seen = labels >= 0
            safe = tf.maximum(labels, 0)
            losses = tf.where(seen, tf.cast(per_example_loss(safe, outputs, classification=True), tf.float64), 0.0)
            hit = tf.logical_and(seen, tf.equal(tf.argmax(outputs, axis=-1, output_type=labels.dtype), labels))
            n = tf.reduce_sum(tf.cast(seen, tf.float64))
            moments = (tf.reduce_sum(tf.cast(hit, tf.float64)), tf.constant(0.0, tf.float64), tf.constant(0.0, tf.float64))
        else:
            losses = tf.cast(per_example_loss(labels, outputs, classification=False), tf.float64)
            y = tf.cast(labels, tf.float64) - center
            n = tf.cast(tf.size(labels), tf.float64)
            moments = (tf.constant(0.0, tf.float64), tf.reduce_sum(y), tf.reduce_sum(y * y))
        unseen = tf.cast(tf.size(labels), tf.float64) - n
        return (tf.reduce_sum(losses), n, unseen, *moments)

    sums = [0.0] * 6  # loss, scored, unseen, correct, sum(y - center), sum((y - center)^2)
    local = 0
    for features, labels in _batches(plan, worker=worker, batch_size=batch_size, max_batches=max_batches):
        sums = [a + float(b) for a, b in zip(sums, score(features, labels))]
        local += int(labels.shape[0])
    loss, total, unseen, correct, y_sum, y_squares = _all_sum(strategy, sums)
    total = max(total, 1.0)
    out: dict[str, Any] = {"eval_split": plan.split, "eval_examples": int(total), "eval_loss": round(loss / total, 6)}
    if classification:
        out.update(eval_accuracy=round(correct / total, 4), eval_unseen_labels=int(unseen))
        detail = f"accuracy {out['eval_accuracy']:.4f}" + (
            f"; {int(unseen)} record(s) with a label training never saw, not scored" if unseen else ""
        )
    else:
        # E[(y - c)^2]: the baseline predicting c; without a training mean, c is the eval mean (the variance).
        baseline = y_squares / total - (0.0 if train_mean is not None else (y_sum / total) ** 2)
        out.update(eval_accuracy=None, eval_mse=round(loss / total, 6), eval_baseline_mse=round(baseline, 6))
        detail = (f"mse {out['eval_mse']:.6g}, baseline mse {out['eval_baseline_mse']:.6g} (always predicting the "
                  f"{'training' if train_mean is not None else 'eval'} mean)")
    log.info("eval on split %r: %d examples (%d on this worker%s), loss %.4f, %s", plan.split, out["eval_examples"],
             local, _capped(plan, max_batches, batch_size), out["eval_loss"], detail)
    return out


def _batches(plan: InputPlan, *, worker: int, batch_size: int, max_batches: int | None):
    """``worker``'s eval batches, the first ``max_batches`` of them (None: all)."""
    return itertools.islice(data.eval_batches(plan, worker=worker, batch_size=batch_size), max_batches)


def _capped(plan: InputPlan, max_batches: int | None, batch_size: int) -> str:
    """The log's note when ``max_batches`` may leave records of the split unscored."""
    if max_batches is None or max_batches * batch_size * plan.num_workers >= plan.num_records:
        return ""
    return (f"; at most {max_batches} batches of {batch_size} a worker of the split's {plan.num_records:,} records: "
            "--eval-records N|all scores more")


def _evaluate_objective(strategy: tf.distribute.Strategy, model: keras.Model, plan: InputPlan, *, worker: int,
                        batch_size: int, objective: Objective, max_batches: int | None = None) -> dict[str, Any]:
    """The mean of the objective's loss per example and each of its accuracies (``eval_<name>``), over the
    records of every worker."""

    @tf.function
    def score(features: dict[str, tf.Tensor], labels: Any) -> list[tf.Tensor]:
        outputs = model(features, training=False)
        n = tf.cast(objective.examples(labels), tf.float64)
        counts = [tf.cast(c, tf.float64) for c in objective.counts(labels, outputs)]
        return [tf.reduce_sum(tf.cast(objective.loss(labels, outputs), tf.float64)), n, *counts]

    sums = [0.0] * (2 + 2 * len(objective.names))
    for features, labels in _batches(plan, worker=worker, batch_size=batch_size, max_batches=max_batches):
        sums = [a + float(b) for a, b in zip(sums, score(features, labels))]
    loss, total, *counts = _all_sum(strategy, sums)
    total = max(total, 1.0)
    out: dict[str, Any] = {"eval_split": plan.split, "eval_examples": int(total), "eval_loss": round(loss / total, 6),
                           "eval_accuracy": None}
    for i, name in enumerate(objective.names):
        out[f"eval_{name}"] = round(counts[2 * i] / max(counts[2 * i + 1], 1.0), 4)
    log.info("eval on split %r: %d examples%s, loss %.4f, %s", plan.split, out["eval_examples"],
             _capped(plan, max_batches, batch_size), out["eval_loss"],
             ", ".join(f"{name} {out[f'eval_{name}']:.4f}" for name in objective.names))
    return out
