"""Workarounds for two Keras 3 bugs that stop ``Model.fit`` under multi-worker MWMS, in one place.

keras-team/keras#20585 and tensorflow/tensorflow#72388:

1. ``fit`` builds the compiled loss and metrics from a first batch merged with ``strategy.reduce``,
   which MWMS refuses for a dict of per-replica values: build them from the batch spec instead, and
   make the model's own build step a no-op for the duration of ``fit``.
2. ``fit`` averages the per-replica step logs (scalars) with ``strategy.reduce(..., axis=0)``,
   which fails on 0-d tensors: average them with ``axis=None``.

Both reach into private Keras names; ``multi_worker_fit`` patches them only inside its ``with``
block and restores them after, and refuses to run on a Keras whose private names moved
(``check_private_names``, which a test calls so that an upgrade fails loudly).
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import keras
import tensorflow as tf

__all__ = ["KERAS_MAJOR", "check_private_names", "multi_worker_fit"]

KERAS_MAJOR = 3  # the Keras major version these workarounds were written for
_TRAINER_MODULE = "keras.src.backend.tensorflow.trainer"
_TRAINER_NAMES = ("reduce_per_replica", "_collective_all_reduce_multi_worker")
_MODEL_NAMES = ("_symbolic_build", "_maybe_symbolic_build")


def _keras_major() -> int:
    return int(keras.__version__.split(".")[0])


def check_private_names() -> Any:
    """Returns Keras's TensorFlow trainer module; raises RuntimeError if a private name moved."""
    import importlib

    if _keras_major() != KERAS_MAJOR:
        raise RuntimeError(
            f"trainer.keras_compat was written for Keras {KERAS_MAJOR}.x, found {keras.__version__}: "
            "re-check keras-team/keras#20585 and tensorflow/tensorflow#72388"
        )
    module = importlib.import_module(_TRAINER_MODULE)
    missing = [f"{_TRAINER_MODULE}.{n}" for n in _TRAINER_NAMES if not callable(getattr(module, n, None))]
    missing += [f"keras.Model.{n}" for n in _MODEL_NAMES if not callable(getattr(keras.Model, n, None))]
    if missing:
        raise RuntimeError(f"Keras {keras.__version__} moved private names trainer.keras_compat patches: {', '.join(missing)}")
    return module


@contextlib.contextmanager
def multi_worker_fit(model: keras.Model, strategy: tf.distribute.Strategy, batch_spec: Any) -> Iterator[None]:
    """Inside the block, ``model.fit`` works under multi-worker MWMS; harmless on one worker.

    ``batch_spec`` is the (features, label) spec of one per-replica batch. Everything patched is
    restored on exit, also after an error.
    """
    tf_trainer = check_private_names()
    with strategy.scope():
        model._symbolic_build(data_batch=batch_spec)
    original = tf_trainer.reduce_per_replica
    collective = tf_trainer._collective_all_reduce_multi_worker

    def reduce_per_replica(values: Any, strategy: Any, reduction: str) -> Any:
        if reduction == "auto" and collective(strategy):
            return tf.nest.map_structure(lambda v: strategy.reduce("MEAN", v, axis=None), values)
        return original(values, strategy, reduction)

    had_own = "_maybe_symbolic_build" in vars(model)
    own = vars(model).get("_maybe_symbolic_build")
    model._maybe_symbolic_build = lambda iterator=None, data_batch=None: None
    tf_trainer.reduce_per_replica = reduce_per_replica
    try:
        yield
    finally:
        tf_trainer.reduce_per_replica = original
        if had_own:
            model._maybe_symbolic_build = own
        else:
            del model._maybe_symbolic_build
