"""``trainer.image_model``: ``learning_rate_schedule`` warms up to the peak, then decays to near 0 at the run's
last step, whatever the run's length; ``build_image_model``'s identity blocks start near their shortcut."""
from __future__ import annotations

import numpy as np
import pytest

from trainer.image_model import IDENTITY_BLOCK_SCALE, WARMUP_SHARE, build_image_model, learning_rate_schedule


@pytest.mark.parametrize("total", [40, 330, 5000])
def test_warms_up_to_the_peak_then_decays_to_near_zero_at_the_last_step(total):
    peak = 0.003
    schedule = learning_rate_schedule(peak, total_steps=total)
    rates = [float(schedule(step)) for step in range(total + 1)]
    warm = total // WARMUP_SHARE
    assert rates[0] == 0 and rates[warm] == pytest.approx(peak)
    assert all(a <= b for a, b in zip(rates[:warm], rates[1:warm + 1]))  # rising
    assert all(a >= b for a, b in zip(rates[warm:], rates[warm + 1:]))  # then falling
    assert rates[total] < 0.01 * peak and 0.4 * peak < rates[total // 2] < 0.7 * peak


def test_identity_blocks_start_near_their_shortcut_and_downsampling_blocks_at_full_scale():
    import keras

    model = build_image_model(9)
    gn2 = [layer for layer in model.layers if layer.name.endswith("_gn2")]
    downsampling = {"stage1_block0_gn2", "stage2_block0_gn2"}
    assert len(gn2) == 6 and {layer.name for layer in gn2} >= downsampling
    # what each block's own path adds to its shortcut, on random images: a quarter of a full path's size
    images = np.random.default_rng(0).random((8, 32, 32, 3), dtype=np.float32)
    paths = keras.Model(model.inputs, [layer.output for layer in gn2])({"image": images})
    for layer, out in zip(gn2, paths):
        expected = 1.0 if layer.name in downsampling else IDENTITY_BLOCK_SCALE
        assert float(np.std(out.numpy())) == pytest.approx(expected, rel=0.05), layer.name
