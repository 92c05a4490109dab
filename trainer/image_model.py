"""``--model image``: a small residual CNN over the decoded ``image`` input (``trainer.image_input``).

Built from scratch (no weights downloaded): a stem convolution, three stages of two residual blocks
(32, 64, 128 filters, stride 2 between stages), global average pooling and a float32 logits layer,
so it trains under mixed precision. Any image size works: the input is ``[None, None, 3]``.

Normalisation is ``GroupNormalization`` (groups of ``GROUP_CHANNELS`` channels), not batch norm: it
normalises each image on its own, so there are no moving statistics to settle and training mode and
inference mode compute the same function. With batch norm, a short run's
moving statistics do not catch up: the eval and the exported model (inference mode) score worse
than training mode on the same images.
Group norm also does not depend on the per-replica batch size.

Each block whose shortcut is the identity starts with a scale of ``IDENTITY_BLOCK_SCALE`` (1/4) on
its last normalisation: it starts near its shortcut, so the untrained network is mostly the stem and
the two downsampling blocks (5 convolutions, not 13) and learns fast; the other blocks grow in as
training needs them. The downsampling blocks keep a scale of 1: with every block at 0, the untrained
network sees 3x3 pixels at most and shapes (digits) are learnt slowly. The identity blocks do not
start at 0 either: Adam moves a scale by about the learning rate a step, so at 0.001 over 300 steps
they could not grow past about 0.15 and digits scored 2 points lower. Figures in BENCHMARKS.md
(Images: accuracy against scikit-learn).

``learning_rate_schedule``: the image model trains with Adam on a cosine decay over the whole run
(a warm-up of ``WARMUP_SHARE`` of the steps to ``--learning-rate``, then down to near 0 at the last
step), so a short run and a long one both end at a small learning rate; figures in BENCHMARKS.md
(Images: accuracy against scikit-learn).
"""
from __future__ import annotations

import keras

from trainer.image_input import IMAGE

__all__ = ["GROUP_CHANNELS", "IDENTITY_BLOCK_SCALE", "WARMUP_SHARE", "build_image_model", "learning_rate_schedule"]

GROUP_CHANNELS = 8  # channels per normalisation group (32 filters: 4 groups)
IDENTITY_BLOCK_SCALE = 0.25  # initial scale of an identity block's last norm: the block starts near its shortcut
WARMUP_SHARE = 20  # the warm-up is 1/WARMUP_SHARE of the run's steps (at least one)


def learning_rate_schedule(peak: float, *, total_steps: int) -> keras.optimizers.schedules.LearningRateSchedule:
    """0 to ``peak`` over the first ``total_steps // WARMUP_SHARE`` steps, then a cosine decay towards 0."""
    return keras.optimizers.schedules.CosineDecay(
        0.0, decay_steps=max(1, total_steps), warmup_target=peak, warmup_steps=max(1, total_steps // WARMUP_SHARE))


def _norm(filters: int, name: str, *, scale: float = 1.0) -> keras.layers.Layer:
    return keras.layers.GroupNormalization(groups=max(1, filters // GROUP_CHANNELS), name=name,
                                           gamma_initializer=keras.initializers.Constant(scale))


def _block(x, filters: int, stride: int, name: str):
    shortcut = x
    y = keras.layers.Conv2D(filters, 3, strides=stride, padding="same", use_bias=False, name=f"{name}_conv1")(x)
    y = _norm(filters, f"{name}_gn1")(y)
    y = keras.layers.ReLU(name=f"{name}_relu1")(y)
    y = keras.layers.Conv2D(filters, 3, padding="same", use_bias=False, name=f"{name}_conv2")(y)
    identity = stride == 1 and shortcut.shape[-1] == filters
    y = _norm(filters, f"{name}_gn2", scale=IDENTITY_BLOCK_SCALE if identity else 1.0)(y)  # module docstring
    if not identity:
        shortcut = keras.layers.Conv2D(filters, 1, strides=stride, use_bias=False, name=f"{name}_proj")(shortcut)
        shortcut = _norm(filters, f"{name}_proj_gn")(shortcut)
    return keras.layers.ReLU(name=f"{name}_out")(keras.layers.Add(name=f"{name}_add")([shortcut, y]))


def build_image_model(num_classes: int | None, widths: tuple[int, ...] = (32, 64, 128)) -> keras.Model:
    """The residual CNN: ``{IMAGE: float [batch, h, w, 3]}`` in, logits (or one value) out."""
    image = keras.Input(shape=(None, None, 3), dtype="float32", name=IMAGE)
    x = keras.layers.Conv2D(widths[0], 3, padding="same", use_bias=False, name="stem_conv")(image)
    x = _norm(widths[0], "stem_gn")(x)
    x = keras.layers.ReLU(name="stem_relu")(x)
    for s, filters in enumerate(widths):
        for b in range(2):
            x = _block(x, filters, 2 if (b == 0 and s > 0) else 1, f"stage{s}_block{b}")
    x = keras.layers.GlobalAveragePooling2D(name="pool")(x)
    logits = keras.layers.Dense(num_classes or 1, dtype="float32", name="logits")(x)
    return keras.Model({IMAGE: image}, logits, name="image_cnn")
