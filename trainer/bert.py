"""``--model bert``: keras-hub's ``BertBackbone`` built from a configuration (no weights downloaded), with
BERT's pre-training heads or a classifier head.

Pre-training model: inputs ``input_ids``, ``input_mask``, ``segment_ids``, ``masked_lm_positions``
(int64, as the shards hold them); outputs ``{"masked_lm": [batch, predictions, vocabulary],
"next_sentence": [batch, 2]}`` logits in float32. The masked-LM head is keras-hub's
``MaskedLMHead`` (dense + GELU + layer norm, then the output projection) whose projection is the
token embedding transposed, tied as in BERT; next-sentence prediction is a dense layer over the
pooled ``[CLS]`` output, as BERT's. The classifier: the first three inputs, dropout over the pooled
output, then one logit per class. ``--init-from``: the classifier's encoder takes the weights of a
pre-training run's latest checkpoint.
"""
from __future__ import annotations

import logging
from typing import Any

import keras
import keras_hub
import tensorflow as tf

from shardprep import naming
from trainer.bert_task import BertError, BertTask

__all__ = ["ENCODER", "build_bert", "restore_encoder"]

log = logging.getLogger(__name__)
ENCODER = "bert_encoder"  # the backbone's layer name in both models
DROPOUT = 0.1  # BERT's dropout, also before the classifier


def _backbone(task: BertTask) -> keras_hub.models.BertBackbone:
    d = task.dims
    return keras_hub.models.BertBackbone(
        vocabulary_size=task.vocab_size, num_layers=d.layers, num_heads=d.heads, hidden_dim=d.hidden,
        intermediate_dim=d.intermediate, dropout=DROPOUT, max_sequence_length=task.max_seq_length, name=ENCODER,
    )


def _int_input(name: str, length: int) -> keras.KerasTensor:
    return keras.Input(shape=(length,), dtype="int64", name=name)


def _encode(backbone: keras_hub.models.BertBackbone, inputs: dict[str, Any]) -> dict[str, Any]:
    return backbone({
        "token_ids": keras.ops.cast(inputs["input_ids"], "int32"),
        "segment_ids": keras.ops.cast(inputs["segment_ids"], "int32"),
        "padding_mask": keras.ops.cast(inputs["input_mask"], "int32"),
    })


def _float32(x: Any, name: str) -> Any:
    """Logits in float32 whatever the precision policy, so the loss is stable."""
    return keras.layers.Activation("linear", dtype="float32", name=name)(x)


def build_bert(task: BertTask, *, sequence_length: int, predictions: int = 0) -> keras.Model:
    """The pre-training or classification model of ``task`` over inputs of ``sequence_length``."""
    backbone = _backbone(task)
    if task.pretraining:
        return BertPretrainer(backbone, sequence_length=sequence_length, predictions=predictions,
                              name=f"bert_{task.size}_pretraining")
    inputs = {name: _int_input(name, sequence_length) for name in ("input_ids", "input_mask", "segment_ids")}
    x = keras.layers.Dropout(DROPOUT, name="classifier_dropout")(_encode(backbone, inputs)["pooled_output"])
    logits = keras.layers.Dense(len(task.labels), name="classifier")(x)
    return keras.Model(inputs, _float32(logits, "logits"), name=f"bert_{task.size}_classifier")


@keras.saving.register_keras_serializable(package="trainer")
class BertPretrainer(keras.Model):
    """The encoder with BERT's two pre-training heads (module docstring).

    Built as keras-hub builds its tasks (a functional model made in ``__init__`` from the backbone),
    so that the saved model rebuilds the tied projection on loading: a plain functional model of a
    head that shares the embedding's weights saves, but does not load.
    """

    def __init__(self, backbone: keras_hub.models.BertBackbone, *, sequence_length: int, predictions: int,
                 **kwargs: Any) -> None:
        inputs = {name: _int_input(name, sequence_length) for name in ("input_ids", "input_mask", "segment_ids")}
        inputs["masked_lm_positions"] = _int_input("masked_lm_positions", predictions)
        encoded = _encode(backbone, inputs)
        head = keras_hub.layers.MaskedLMHead(
            vocabulary_size=backbone.vocabulary_size, token_embedding=backbone.token_embedding,
            intermediate_activation="gelu", kernel_initializer=keras.initializers.TruncatedNormal(stddev=0.02),
            name="masked_lm_head",
        )
        masked = head(encoded["sequence_output"], mask_positions=keras.ops.cast(inputs["masked_lm_positions"], "int32"))
        nsp = keras.layers.Dense(2, kernel_initializer=keras.initializers.TruncatedNormal(stddev=0.02),
                                 name="next_sentence_head")(encoded["pooled_output"])
        outputs = {"masked_lm": _float32(masked, "masked_lm"), "next_sentence": _float32(nsp, "next_sentence")}
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        self.backbone, self.sequence_length, self.predictions = backbone, sequence_length, predictions

    def get_config(self) -> dict[str, Any]:
        return {"backbone": keras.saving.serialize_keras_object(self.backbone), "sequence_length": self.sequence_length,
                "predictions": self.predictions, "name": self.name, "trainable": self.trainable}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> BertPretrainer:
        config = dict(config)
        config["backbone"] = keras.saving.deserialize_keras_object(config["backbone"])
        return cls(**config)


def restore_encoder(model: keras.Model, task: BertTask) -> None:
    """Loads ``model``'s encoder with the one of the pre-training run ``task.init_from`` (its latest checkpoint)."""
    assert task.init_from is not None
    folder = naming.join(task.init_from, "checkpoints")
    latest = tf.train.latest_checkpoint(folder)
    if latest is None:
        raise BertError(f"--init-from {task.init_from}: no checkpoint in {folder}")
    # The same pre-training model rebuilt outside any strategy, restored, then its encoder's weights copied.
    source = build_bert(BertTask("bert-pretraining", task.size, task.vocab_size, task.max_seq_length, task.vocab_sha256),
                        sequence_length=task.max_seq_length, predictions=1)
    try:
        tf.train.Checkpoint(model=source).restore(latest).expect_partial().assert_existing_objects_matched()
    except (AssertionError, ValueError, tf.errors.OpError) as e:
        raise BertError(f"--init-from {task.init_from}: checkpoint {latest} is not this BERT's "
                        f"({str(e).splitlines()[0][:200]})") from None
    model.get_layer(ENCODER).set_weights(source.get_layer(ENCODER).get_weights())
    log.info("encoder weights restored from %s", latest)
