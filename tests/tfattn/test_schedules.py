"""tfattn.schedules: the paper's schedule and warm-up schedules with a directly set peak."""

import numpy as np
import pytest

from tfattn import schedules


def _values(fn, steps):
  return np.array([float(fn(step)) for step in steps])


def test_noam_peaks_at_warmup_with_a_d_model_dependent_value():
  values = _values(lambda s: schedules.noam_learning_rate(s, 512, 4000), [0, 3998, 3999, 8000])
  assert values[2] == pytest.approx(512**-0.5 * 4000**-0.5, rel=1e-4)
  assert values[0] < values[1] < values[2] > values[3]


@pytest.mark.parametrize("decay", schedules.WARMUP_DECAYS)
def test_warmup_schedules_peak_at_the_given_rate(decay):
  schedule = schedules.WarmupSchedule(peak=1e-3, warmup_steps=100, total_steps=1000, decay=decay)
  values = _values(schedule, [0, 49, 99, 500, 999])
  assert values[0] == pytest.approx(1e-5, rel=1e-4)  # step 1 of 100
  assert values[1] == pytest.approx(5e-4, rel=1e-4)
  assert values[2] == pytest.approx(1e-3, rel=1e-4)  # the peak, whatever d_model
  if decay == "constant":
    assert values[3] == values[4] == pytest.approx(1e-3)
  elif decay == "rsqrt":
    assert values[3] == pytest.approx(1e-3 * (100 / 501) ** 0.5, rel=1e-4)
  else:
    assert values[4] == pytest.approx(0.0, abs=1e-8)
    assert values[3] == pytest.approx(1e-3 * 0.5 * (1 + np.cos(np.pi * 401 / 900)), rel=1e-4)


def test_unknown_decay_is_refused():
  with pytest.raises(ValueError, match="decay must be one of"):
    schedules.WarmupSchedule(1e-3, 10, 100, decay="linear")


def test_the_cosine_decay_can_end_at_a_floor():
  """nanoGPT's min_lr: the cosine goes from the peak to the floor; without one, to 0 exactly as
  before."""
  floored = schedules.WarmupSchedule(1e-3, 100, 1000, "cosine", floor=1e-4)
  plain = schedules.WarmupSchedule(1e-3, 100, 1000, "cosine")
  steps = [0, 99, 500, 999, 2000]
  values, without = _values(floored, steps), _values(plain, steps)
  assert values[0] == pytest.approx(1e-5, rel=1e-4)  # the warm-up is unchanged
  assert values[1] == pytest.approx(1e-3, rel=1e-4)
  assert values[2] == pytest.approx(1e-4 + 0.9 * without[2], rel=1e-4)
  assert values[3] == pytest.approx(1e-4, rel=1e-4) and values[4] == pytest.approx(1e-4, rel=1e-4)
  assert floored.get_config()["floor"] == 1e-4
  with pytest.raises(ValueError, match="applies to the cosine decay"):
    schedules.WarmupSchedule(1e-3, 10, 100, decay="rsqrt", floor=1e-4)
  with pytest.raises(ValueError, match="the floor must be in"):
    schedules.WarmupSchedule(1e-3, 10, 100, floor=1e-3)
