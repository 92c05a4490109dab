"""Images in the input pipeline: ``image/encoded`` bytes to float pixels, on the worker, in tf.data.

A parsed batch's ``image/encoded`` strings are decoded (JPEG, PNG, GIF's first frame, BMP; always 3
channels), resized and, for training, randomly cropped and flipped, into one float32 tensor
``IMAGE`` of shape ``[batch, size, size, 3]`` in [0, 1]. ``data.parser`` calls ``preprocess`` when
the plan has an ``image_size`` (``trainer.image_rate`` measures its images/s per CPU core).
"""
from __future__ import annotations

from typing import Any

import tensorflow as tf

__all__ = ["ENCODED", "IMAGE", "preprocess"]

ENCODED = "image/encoded"
IMAGE = "image"
_PAD = 8  # training resizes to size + size // _PAD and crops size back: a random shift of up to 1/8


def _one(encoded: tf.Tensor, size: int, training: bool) -> tf.Tensor:
    image = tf.io.decode_image(encoded, channels=3, expand_animations=False)
    image.set_shape([None, None, 3])
    if training:
        big = size + max(1, size // _PAD)
        image = tf.image.resize(image, [big, big])
        image = tf.image.random_crop(image, [size, size, 3])
        image = tf.image.random_flip_left_right(image)
    else:
        image = tf.image.resize(image, [size, size])
    return image / 255.0


def preprocess(features: dict[str, Any], size: int, *, training: bool) -> dict[str, Any]:
    """``features`` with its ``ENCODED`` strings replaced by ``IMAGE``, float32 ``[batch, size, size, 3]``."""
    features = dict(features)
    encoded = features.pop(ENCODED)
    features[IMAGE] = tf.map_fn(lambda x: _one(x, size, training), encoded,
                                fn_output_signature=tf.TensorSpec([size, size, 3], tf.float32))
    return features
