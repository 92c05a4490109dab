"""Images in the input pipeline: ``image/encoded`` bytes to float pixels, on the worker, in tf.data.

A parsed batch's ``image/encoded`` strings are decoded (JPEG, PNG, GIF's first frame, BMP; always 3
channels) and resized into one float32 tensor ``IMAGE`` of shape ``[batch, size, size, 3]`` in [0, 1].
``data.parser`` calls ``preprocess`` when the plan has an ``image_size`` (``trainer.image_rate``
measures its images/s per CPU core).

Training batches are augmented as ``augment`` says (``trainer.settings.AUGMENTS``, ``--augment``):

- ``none``: resized only, as in evaluation.
- ``crop``: resized to ``size + size // 8`` and a random ``size`` square cropped from it (a shift of
  up to ``size // 8`` pixels). Safe for any image whose class survives a small shift.
- ``crop,flip``: the crop, then a left-right mirror of half the images. Only for classes that look
  the same mirrored (animals, scenes, most objects): never for digits, text, signs or logos, where
  a mirror makes another image (or no valid one).

Evaluation (``training=False``) always resizes only: the same image gives the same pixels every time.
"""
from __future__ import annotations

from typing import Any

import tensorflow as tf

from trainer.settings import AUGMENTS, DEFAULT_AUGMENT

__all__ = ["AUGMENTS", "DEFAULT_AUGMENT", "ENCODED", "IMAGE", "augment_steps", "preprocess"]

ENCODED = "image/encoded"
IMAGE = "image"
_PAD = 8  # the crop resizes to size + size // _PAD and crops size back: a random shift of up to 1/8


def augment_steps(augment: str) -> frozenset[str]:
    """The steps of ``augment`` (``crop``, ``flip``), refusing a value not in ``AUGMENTS`` with ``ValueError``."""
    if augment not in AUGMENTS:
        raise ValueError(f"augment {augment!r}: expected one of {', '.join(AUGMENTS)}")
    return frozenset(s for s in augment.split(",") if s != "none")


def _one(encoded: tf.Tensor, size: int, steps: frozenset[str]) -> tf.Tensor:
    image = tf.io.decode_image(encoded, channels=3, expand_animations=False)
    image.set_shape([None, None, 3])
    if "crop" in steps:
        big = size + max(1, size // _PAD)
        image = tf.image.resize(image, [big, big])
        image = tf.image.random_crop(image, [size, size, 3])
    else:
        image = tf.image.resize(image, [size, size])
    if "flip" in steps:
        image = tf.image.random_flip_left_right(image)
    return image / 255.0


def preprocess(features: dict[str, Any], size: int, *, training: bool, augment: str = DEFAULT_AUGMENT) -> dict[str, Any]:
    """``features`` with its ``ENCODED`` strings replaced by ``IMAGE``, float32 ``[batch, size, size, 3]``;
    augmented as ``augment`` says when ``training``, resized only otherwise."""
    steps = augment_steps(augment) if training else frozenset()
    features = dict(features)
    encoded = features.pop(ENCODED)
    features[IMAGE] = tf.map_fn(lambda x: _one(x, size, steps), encoded,
                                fn_output_signature=tf.TensorSpec([size, size, 3], tf.float32))
    return features
