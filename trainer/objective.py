"""What a model is trained to minimise and which accuracies it counts: one object per kind of label.

``loss(labels, outputs)`` is one value per example (float32): the custom loop divides its sum by
the global batch, ``fit`` averages it, so both minimise the mean over the global batch.
``counts(labels, outputs)`` gives, for each of ``names``, (correct, scored) sums of the batch; the
meter adds them up over the steps of an epoch (``trainer.metrics``).

BERT pre-training (``labels``: ``masked_lm_ids``, ``masked_lm_weights``, ``next_sentence_labels``;
``outputs``: ``masked_lm`` and ``next_sentence`` logits): an example's loss is the mean of its
masked positions' cross-entropy weighted by ``masked_lm_weights`` (padding positions weigh 0), plus
its next-sentence cross-entropy. BERT's ``run_pretraining.py`` weights the masked tokens of a whole
(per-device) batch together instead; per example, every example counts alike and the loss does not
depend on how the global batch is split among replicas. Masked-LM accuracy is over masked tokens
(weighted), next-sentence accuracy over examples.
"""
from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

__all__ = ["BertPretraining", "Classification", "Objective", "Regression", "objective_for", "per_example_loss"]


def per_example_loss(labels: tf.Tensor, outputs: tf.Tensor, *, classification: bool) -> tf.Tensor:
    outputs = tf.cast(outputs, tf.float32)
    if classification:
        return keras.losses.sparse_categorical_crossentropy(labels, outputs, from_logits=True)
    return tf.square(tf.cast(labels, tf.float32) - tf.squeeze(outputs, axis=-1))


def _hits(labels: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
    return tf.cast(tf.equal(tf.argmax(logits, axis=-1, output_type=labels.dtype), labels), tf.float32)


class Objective:
    """Regression and the base of the others: squared error, no accuracy."""

    names: tuple[str, ...] = ()
    classification = False

    def loss(self, labels: Any, outputs: Any) -> tf.Tensor:
        return per_example_loss(labels, outputs, classification=self.classification)

    def counts(self, labels: Any, outputs: Any) -> list[tf.Tensor]:
        """(correct, scored) per name, flattened: ``[correct_0, scored_0, correct_1, ...]``."""
        return []

    def examples(self, labels: Any) -> tf.Tensor:
        return tf.shape(tf.nest.flatten(labels)[0])[0]


Regression = Objective


class Classification(Objective):
    """Cross-entropy over class logits; accuracy over examples."""

    names = ("accuracy",)
    classification = True

    def counts(self, labels: tf.Tensor, outputs: tf.Tensor) -> list[tf.Tensor]:
        return [tf.reduce_sum(_hits(labels, outputs)), tf.cast(tf.size(labels), tf.float32)]


class BertPretraining(Objective):
    """Masked-LM plus next-sentence loss (module docstring)."""

    names = ("masked_lm_accuracy", "next_sentence_accuracy")
    classification = True

    def loss(self, labels: dict[str, tf.Tensor], outputs: dict[str, tf.Tensor]) -> tf.Tensor:
        weights = tf.cast(labels["masked_lm_weights"], tf.float32)
        token = keras.losses.sparse_categorical_crossentropy(
            labels["masked_lm_ids"], tf.cast(outputs["masked_lm"], tf.float32), from_logits=True)
        masked = tf.reduce_sum(token * weights, axis=-1) / tf.maximum(tf.reduce_sum(weights, axis=-1), 1e-5)
        nsp = keras.losses.sparse_categorical_crossentropy(
            labels["next_sentence_labels"], tf.cast(outputs["next_sentence"], tf.float32), from_logits=True)
        return masked + nsp

    def counts(self, labels: dict[str, tf.Tensor], outputs: dict[str, tf.Tensor]) -> list[tf.Tensor]:
        weights = tf.cast(labels["masked_lm_weights"], tf.float32)
        nsp = labels["next_sentence_labels"]
        return [
            tf.reduce_sum(_hits(labels["masked_lm_ids"], outputs["masked_lm"]) * weights), tf.reduce_sum(weights),
            tf.reduce_sum(_hits(nsp, outputs["next_sentence"])), tf.cast(tf.size(nsp), tf.float32),
        ]


def objective_for(classification: bool) -> Objective:
    """The objective of a single label: cross-entropy over classes, or squared error."""
    return Classification() if classification else Regression()
