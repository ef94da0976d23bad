"""train.performance: the matmul peak (a median, never 0, measured once a process and device), a
peak measured low measured again and MFU never clamped, and MFU printed with digits enough for a
small model."""

import pytest
import tensorflow as tf

from train import performance


def test_the_matmul_peak_is_a_positive_median_of_timed_calls():
  peak = performance.measure_matmul_peak("/CPU:0", "float32", size=64, seconds=0.0, repeats=3)
  assert peak > 0
  assert performance.format_flops(peak).endswith("FLOP/s")
  assert not performance.format_flops(peak).startswith("0.0")


def test_a_peak_measured_low_is_measured_again_and_mfu_is_never_clamped_to_1():
  """MFU above 1 means the start-up peak was measured under load: the peak is measured again,
  once; what is still above it is reported as it is (it printed "MFU 1.000" before)."""
  measured = []
  meter = performance.Meter(peak_flops=1e6, remeasure=lambda: measured.append(1) or 4e6)
  meter.add(tokens=100, step_flops=1e15)  # no CPU does this in the moments since reset()
  tokens_per_second, mfu = meter.read()
  assert measured == [1] and meter.peak_flops == 4e6 and tokens_per_second > 0
  assert mfu > 1.0 and performance.format_mfu(mfu).endswith(" (above the measured peak)")
  meter.reset()
  meter.add(tokens=100, step_flops=1e15)
  assert meter.read()[1] > 1.0 and measured == [1]  # measured again once only
  meter = performance.Meter(peak_flops=1e6, remeasure=lambda: 1e30)  # the device is free now
  meter.add(tokens=100, step_flops=1e15)
  assert 0 < meter.read()[1] < 1 and meter.peak_flops == 1e30
  meter = performance.Meter(peak_flops=1e30)
  meter.add(tokens=100, step_flops=1.0)
  assert 0 < meter.read()[1] < 1 and meter.peak_flops == 1e30


def test_meters_of_one_device_share_its_peak_and_a_new_measurement_raises_it(monkeypatch):
  """Trainers built one after another in a process time their device once; a measurement made
  again (MFU above 1) raises the peak that later meters start from, never lowers it."""
  timings = iter([3e9, 5e9, 1e9, 2e9])
  dtypes = []

  def measure(device, dtype):
    dtypes.append(dtype)
    return next(timings)

  monkeypatch.setattr(performance, "measure_matmul_peak", measure)
  monkeypatch.setattr(performance, "_peaks", {})
  strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
  first, second = (performance.meter_for(strategy, "float32") for _ in range(2))
  assert first.peak_flops == second.peak_flops == 3e9 and dtypes == ["float32"]
  assert first.remeasure() == 5e9 and performance.meter_for(strategy, "float32").peak_flops == 5e9
  assert second.remeasure() == 5e9  # measured 1e9 under load: the peak stays the highest
  assert performance.meter_for(strategy, "bfloat16").peak_flops == 2e9  # its own peak
  assert dtypes == ["float32"] * 3 + ["bfloat16"]


def test_mfu_is_printed_with_significant_digits():
  assert performance.format_mfu(0.41234) == "0.412"
  assert performance.format_mfu(0.0031234) == "0.00312"
  assert performance.format_mfu(4.7e-5) == "4.7e-05"
  assert performance.format_mfu(0.0) == "0"
  assert performance.format_flops(3.12e14) == "312 TFLOP/s"
  assert performance.format_flops(4.53e10) == "45.3 GFLOP/s"


def test_logical_gpus_of_one_card_count_as_one_device_for_the_peak():
  if len(tf.config.list_physical_devices("GPU")) != 1:
    pytest.skip("needs exactly one GPU (the GPU pass runs the fast suite there)")
  assert performance._physical_gpu("/GPU:0") == performance._physical_gpu("/GPU:1")
