"""``--eval-split``: loss and accuracy of the trained model on a held-out split, every record once.

Each worker scores its own records of the split (the same planning as training, but nothing is
dropped: the last batch may be partial) with no collective per batch, so the workers may hold
different numbers of records; one all-reduce then adds up their sums.
"""
from __future__ import annotations

import logging
from typing import Any

import keras
import tensorflow as tf

from trainer import data
from trainer.loop import per_example_loss
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
) -> dict[str, Any]:
    """Scores ``worker``'s records of ``plan``; returns the totals over all workers."""

    @tf.function
    def score(features: dict[str, tf.Tensor], labels: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        outputs = model(features, training=False)
        loss = tf.reduce_sum(tf.cast(per_example_loss(labels, outputs, classification=classification), tf.float64))
        if classification:
            right = tf.reduce_sum(tf.cast(tf.equal(tf.argmax(outputs, axis=-1, output_type=labels.dtype), labels), tf.int64))
        else:
            right = tf.constant(0, tf.int64)
        return loss, right, tf.size(labels, out_type=tf.int64)

    loss_sum, correct, count = 0.0, 0, 0
    for features, labels in data.eval_batches(plan, worker=worker, batch_size=batch_size):
        loss, right, n = score(features, labels)
        loss_sum, correct, count = loss_sum + float(loss), correct + int(right), count + int(n)
    total_loss, total_correct, total = _all_sum(strategy, [loss_sum, correct, count])
    out = {
        "eval_split": plan.split,
        "eval_examples": int(total),
        "eval_loss": round(total_loss / total, 6),
        "eval_accuracy": round(total_correct / total, 4) if classification else None,
    }
    log.info(
        "eval on split %r: %d examples (%d on this worker), loss %.4f%s", plan.split, out["eval_examples"], count,
        out["eval_loss"], f", accuracy {out['eval_accuracy']:.4f}" if classification else "",
    )
    return out
