"""``trainer.image_input``: each ``--augment`` setting does what it says (flips only with ``flip``, a shift with
``crop``, nothing with ``none``), evaluation is the same every time, and the flag reaches the config."""
from __future__ import annotations

import io

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from trainer.image_input import ENCODED, IMAGE, augment_steps, preprocess
from trainer.settings import AUGMENTS, ConfigError, TrainConfig
from trainer.train import parse_args

SIZE = 16
DRAWS = 64  # images per batch: with flip, all mirrored or none has chance 2 * 2^-64


def _ramp_png(width: int = 40, height: int = 40) -> bytes:
    """Dark on the left, bright on the right: a mirror is the only change that makes the left brighter."""
    row = np.linspace(0, 255, width).astype(np.uint8)
    pixels = np.repeat(np.repeat(row[None, :, None], height, 0), 3, 2)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "PNG")
    return out.getvalue()


def _batch(augment: str, *, training: bool, label: int = 3) -> np.ndarray:
    features = {ENCODED: tf.constant([_ramp_png()] * DRAWS), "label": tf.constant([label] * DRAWS)}
    out = preprocess(features, SIZE, training=training, augment=augment)
    assert ENCODED not in out and out["label"].shape == (DRAWS,)
    images = out[IMAGE].numpy()
    assert images.shape == (DRAWS, SIZE, SIZE, 3) and images.dtype == np.float32
    assert images.min() >= 0 and images.max() <= 1
    return images


def _mirrored(images: np.ndarray) -> np.ndarray:
    """Per image: True where its left column is brighter than its right one."""
    return images[:, :, 0, :].mean(axis=(1, 2)) > images[:, :, -1, :].mean(axis=(1, 2))


def test_settings_name_their_steps():
    assert [augment_steps(a) for a in AUGMENTS] == [frozenset(), {"crop"}, {"crop", "flip"}]
    for bad in ("flip", "crop, flip", "flip,crop", "", "random"):
        with pytest.raises(ValueError, match="expected one of none, crop, crop,flip"):
            augment_steps(bad)


def test_evaluation_resizes_only_and_is_the_same_every_time():
    tf.random.set_seed(0)
    plain = _batch("none", training=False)
    assert np.all(plain == plain[0]) and not _mirrored(plain).any()
    for augment in AUGMENTS:  # the setting does not touch evaluation
        assert np.array_equal(_batch(augment, training=False), plain)


def test_none_trains_on_the_evaluation_pixels():
    assert np.array_equal(_batch("none", training=True), _batch("none", training=False))


def test_crop_shifts_and_never_flips():
    tf.random.set_seed(1)
    images = _batch("crop", training=True)
    assert not _mirrored(images).any()
    assert len({im.tobytes() for im in images}) > 1  # random shifts: not every crop the same
    evaluation = _batch("crop", training=False)
    assert not any(np.array_equal(im, evaluation[0]) for im in images)  # a crop of the larger resize, not the eval pixels


def test_crop_flip_mirrors_about_half():
    tf.random.set_seed(2)
    mirrored = _mirrored(_batch("crop,flip", training=True))
    assert 0 < mirrored.sum() < DRAWS, mirrored.sum()


def test_the_flag_reaches_the_config_and_refuses_other_values(capsys):
    base = ["--data", "ds", "--label", "image/class/label", "--model", "image"]
    assert parse_args(base).augment == "crop"
    assert parse_args([*base, "--augment", "none"]).augment == "none"
    assert parse_args([*base, "--augment", "crop,flip"]).augment == "crop,flip"
    with pytest.raises(SystemExit) as stop:
        parse_args([*base, "--augment", "flip"])
    assert stop.value.code == 2 and "--augment" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="--augment 'mirror': expected one of none, crop, crop,flip"):
        TrainConfig(data="ds", model="image", label="y", model_dir="m", epochs=1, augment="mirror")
