"""Models built from the manifest's features: ``mlp``, ``text``, or the user's ``module:function``.

Every model takes the parsed feature dict and returns logits (classification, ``num_classes``
outputs) or one value (regression), in float32 even under mixed precision so the loss is stable.
A user function is called as ``fn(features=..., label=..., num_classes=...)`` with ``features``
the manifest's JSON ``{name: {"dtype", "shape"}}`` of the inputs and must return a ``keras.Model``.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import keras
import tensorflow as tf

from shardprep.schema import FeatureSpec
from trainer.features import MISSING_INT64, USER_MODEL, ModelError, model_kind, user_model_fn

__all__ = [
    "HASH_BINS", "ONE_HOT_MAX", "FillMissing", "HashedNgramBag", "IntsWithMissing", "MissingIndicator", "ModelError",
    "build_model",
]

log = logging.getLogger(__name__)
Features = Mapping[str, FeatureSpec]
ONE_HOT_MAX = 64  # mlp: a string feature with at most this many training values is one-hot, above it hashed
HASH_BINS, HASH_DIM = 1024, 8  # mlp: hashed string features, and their embedding width


def _inputs(features: Features) -> dict[str, keras.KerasTensor]:
    return {
        name: keras.Input(shape=spec.shape, dtype=spec.dtype, name=name)
        for name, spec in features.items()
    }


def _head(x: Any, num_classes: int | None) -> Any:
    return keras.layers.Dense(num_classes or 1, dtype="float32", name="logits")(x)


def _standardised(name: str, t: Any, stats: Mapping[str, Any]) -> Any:
    """``(x - mean) / std`` with the manifest's statistics of the training split, inside the model, so the
    exported model takes raw values; unchanged where the data set has no statistics (older manifests)."""
    if "mean" not in stats:
        return t
    std = stats.get("std") or 1.0
    return keras.layers.Normalization(mean=stats["mean"], variance=std * std, name=f"standardise_{_safe(name)}")(t)


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in name)


def _numeric(name: str, t: Any, spec: FeatureSpec, stats: Mapping[str, Any]) -> tuple[list[Any], str]:
    """A number column: missing values (NaN, or ``MISSING_INT64`` for integers: ``trainer.data``) imputed with
    the mean plus a 0/1 indicator."""
    if spec.nullable and spec.dtype == "int64":
        t = IntsWithMissing(name=f"missing_as_nan_{_safe(name)}")(t)
    t = keras.ops.cast(t, "float32") if t.dtype != "float32" else t
    t = keras.layers.Reshape((1,))(t) if not spec.shape else t
    how = "standardised" if "mean" in stats else "raw (no statistics)"
    if spec.nullable:
        missing = MissingIndicator(name=f"missing_{_safe(name)}")(t)
        t = FillMissing(value=float(stats.get("mean", 0.0)), name=f"impute_{_safe(name)}")(t)
        return [_standardised(name, t, stats), missing], f"{how}, missing imputed with the mean + an indicator"
    return [_standardised(name, t, stats)], how


def _categorical(name: str, t: Any, stats: Mapping[str, Any]) -> tuple[list[Any], str]:
    """A string column: one-hot over the training values up to ``ONE_HOT_MAX``, else hashed to an embedding."""
    top = stats.get("top")
    distinct = stats.get("distinct")
    if isinstance(top, list) and not stats.get("distinct_capped") and distinct == len(top) and distinct <= ONE_HOT_MAX:
        vocabulary = sorted(str(v) for v, _ in top)
        x = keras.layers.StringLookup(vocabulary=vocabulary, output_mode="one_hot", name=f"onehot_{_safe(name)}")(t)
        return [x], f"one-hot over {len(vocabulary)} values (+1 for unseen)"
    ids = keras.layers.Hashing(num_bins=HASH_BINS, name=f"hash_{_safe(name)}")(t)
    x = keras.layers.Embedding(HASH_BINS, HASH_DIM, name=f"embed_{_safe(name)}")(ids)
    why = f"{distinct} values > {ONE_HOT_MAX}" if distinct is not None else "no statistics"
    return [x], f"hashed to {HASH_BINS} buckets, embedding of {HASH_DIM} ({why})"


@keras.saving.register_keras_serializable(package="trainer")
class MissingIndicator(keras.layers.Layer):
    """1.0 where a float is missing (NaN), else 0.0."""

    def call(self, x: tf.Tensor) -> tf.Tensor:
        return tf.cast(tf.math.is_nan(x), tf.float32)


@keras.saving.register_keras_serializable(package="trainer")
class IntsWithMissing(keras.layers.Layer):
    """int64 to float32, ``MISSING_INT64`` (a value the record left out) to NaN."""

    def call(self, x: tf.Tensor) -> tf.Tensor:
        return tf.where(tf.equal(x, MISSING_INT64), tf.constant(float("nan")), tf.cast(x, tf.float32))

    def compute_output_shape(self, input_shape: Any) -> Any:
        return input_shape

    def compute_output_spec(self, x: Any) -> Any:
        return keras.KerasTensor(x.shape, dtype="float32")


@keras.saving.register_keras_serializable(package="trainer")
class FillMissing(keras.layers.Layer):
    """NaN replaced by ``value`` (the training mean)."""

    def __init__(self, *, value: float = 0.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.value = value

    def call(self, x: tf.Tensor) -> tf.Tensor:
        return tf.where(tf.math.is_nan(x), tf.constant(self.value, x.dtype), x)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "value": self.value}


def _mlp(features: Features, num_classes: int | None, hidden: Sequence[int] = (64, 64), *,
         statistics: Mapping[str, dict] | None = None) -> keras.Model:
    inputs = _inputs(features)
    columns, treated = [], {}
    for name, t in inputs.items():
        stats = (statistics or {}).get(name, {})
        if features[name].dtype == "string":
            parts, how = _categorical(name, t, stats)
        else:
            parts, how = _numeric(name, t, features[name], stats)
        columns += parts
        treated.setdefault((features[name].dtype, how), []).append(name)
    for (dtype, how), names in treated.items():  # one line per treatment: 64 pixel columns are one line
        shown = ", ".join(names[:3]) + (f", ... {names[-1]}" if len(names) > 4 else "".join(f", {n}" for n in names[3:]))
        log.info("mlp feature%s %s (%s): %s", f"s ({len(names)})" if len(names) > 1 else "", shown, dtype, how)
    x = keras.layers.Concatenate()(columns) if len(columns) > 1 else columns[0]
    for i, width in enumerate(hidden):
        x = keras.layers.Dense(width, activation="relu", name=f"hidden_{i}")(x)
    return keras.Model(inputs, _head(x, num_classes), name="mlp")


@keras.saving.register_keras_serializable(package="trainer")
class HashedNgramBag(keras.layers.Layer):
    """Mean embedding of a string's hashed word n-grams: no vocabulary to build or download."""

    def __init__(self, *, buckets: int = 1 << 15, dim: int = 32, max_n: int = 2, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.buckets, self.dim, self.max_n = buckets, dim, max_n

    def build(self, input_shape: Any) -> None:
        self.table = self.add_weight(shape=(self.buckets, self.dim), initializer="uniform", name="table")

    def call(self, text: tf.Tensor) -> tf.Tensor:
        words = tf.strings.split(tf.strings.lower(text))
        grams = tf.concat([tf.strings.ngrams(words, n) for n in range(1, self.max_n + 1)], axis=1)
        ids = tf.strings.to_hash_bucket_fast(grams, self.buckets)
        # A text with no words gets the zero vector instead of a division by zero.
        return tf.nn.safe_embedding_lookup_sparse(
            tf.convert_to_tensor(self.table), ids.to_sparse(), combiner="mean"
        )

    def compute_output_shape(self, input_shape: Any) -> tuple[Any, ...]:
        return (input_shape[0], self.dim)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "buckets": self.buckets, "dim": self.dim, "max_n": self.max_n}


def _text(features: Features, num_classes: int | None) -> keras.Model:
    inputs = _inputs(features)
    bags = [HashedNgramBag(name=f"bag_{name}")(t) for name, t in inputs.items()]
    x = keras.layers.Concatenate()(bags) if len(bags) > 1 else bags[0]
    x = keras.layers.Dense(32, activation="relu", name="hidden")(x)
    return keras.Model(inputs, _head(x, num_classes), name="text")


def _user(spec: str, features: Features, *, label: str, num_classes: int | None) -> keras.Model:
    as_json = {k: v.to_json() for k, v in features.items()}
    model = user_model_fn(spec)(features=as_json, label=label, num_classes=num_classes)
    if not isinstance(model, keras.Model):
        raise ModelError(f"--model {spec} returned {type(model).__name__}, expected a keras.Model")
    return model


def build_model(name: str, *, features: Features, label: str, num_classes: int | None,
                statistics: Mapping[str, dict] | None = None) -> keras.Model:
    """Builds model ``name`` over ``features`` (inputs only); ``num_classes`` None means regression.

    ``statistics``: the manifest's statistics of the training split (``mlp`` standardises with them).
    """
    kind = model_kind(name)
    if kind == USER_MODEL:
        return _user(name, features, label=label, num_classes=num_classes)
    if kind == "mlp":
        return _mlp(features, num_classes, statistics=statistics)
    return _BUILTIN[kind](features, num_classes)


def _image(features: Features, num_classes: int | None) -> keras.Model:
    from trainer.image_model import build_image_model

    return build_image_model(num_classes)


_BUILTIN = {"mlp": _mlp, "text": _text, "image": _image}
