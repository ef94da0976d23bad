"""train.performance: the matmul peak (a median, never 0), MFU never above 1, and MFU printed
with digits enough for a small model."""

import pytest
import tensorflow as tf

from train import performance


def test_the_matmul_peak_is_a_positive_median_of_timed_calls():
  peak = performance.measure_matmul_peak("/CPU:0", "float32", size=64, seconds=0.0, repeats=3)
  assert peak > 0
  assert performance.format_flops(peak).endswith("FLOP/s")
  assert not performance.format_flops(peak).startswith("0.0")


def test_mfu_is_never_above_1_the_peak_rises_to_what_the_model_reached():
  meter = performance.Meter(peak_flops=1e6)  # as if measured while the CPU was busy
  meter.add(tokens=100, step_flops=1e15)  # no CPU does this in the moments since reset()
  tokens_per_second, mfu = meter.read()
  assert mfu == 1.0 and tokens_per_second > 0
  assert meter.peak_flops > 1e6
  meter = performance.Meter(peak_flops=1e30)
  meter.add(tokens=100, step_flops=1.0)
  assert 0 < meter.read()[1] < 1 and meter.peak_flops == 1e30


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
