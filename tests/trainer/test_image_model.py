"""``trainer.image_model.learning_rate_schedule``: a warm-up to the peak, then a cosine decay that ends near 0
at the run's last step, whatever the run's length."""
from __future__ import annotations

import pytest

from trainer.image_model import WARMUP_SHARE, learning_rate_schedule


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
