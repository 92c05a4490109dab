"""``trainer.image_model``: ``learning_rate_schedule`` warms up to the peak, then decays to near 0 at the run's
last step, whatever the run's length; ``build_image_model``'s identity blocks start as their shortcut."""
from __future__ import annotations

import numpy as np
import pytest

from trainer.image_model import WARMUP_SHARE, build_image_model, learning_rate_schedule


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


def _gn2_scales(model) -> dict[str, float]:
    return {layer.name: float(np.abs(layer.gamma.numpy()).max()) for layer in model.layers if layer.name.endswith("_gn2")}


def test_identity_blocks_start_as_their_shortcut_and_downsampling_blocks_do_not():
    model = build_image_model(9)
    scales = _gn2_scales(model)
    downsampling = {f"stage{s}_block0_gn2" for s in (1, 2)}
    assert {n for n, g in scales.items() if g > 0} == downsampling and len(scales) == 6
    # an identity block's own path adds nothing at the start: its convolutions do not change the output
    images = np.random.default_rng(0).random((4, 32, 32, 3), dtype=np.float32)
    before = model({"image": images}).numpy()
    for layer in model.layers:
        if layer.name.endswith(("_conv1", "_conv2")) and not layer.name.startswith(("stage1_block0", "stage2_block0")):
            layer.kernel.assign(layer.kernel * 3.0 + 0.1)
    assert np.allclose(model({"image": images}).numpy(), before, atol=1e-5)
    # a downsampling block's path does (a new direction: a norm follows, so a scale alone would change nothing)
    kernel = model.get_layer("stage1_block0_conv2").kernel
    kernel.assign(np.random.default_rng(1).normal(0, 0.05, kernel.shape).astype(np.float32))
    assert not np.allclose(model({"image": images}).numpy(), before, atol=1e-3)
