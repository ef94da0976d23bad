"""Throughput and model FLOP utilisation (MFU) for the progress line: analytic training FLOPs
(`tfattn.flops`) over a matmul peak measured once, at start, on the training device."""

import time

import tensorflow as tf
from absl import logging


def measure_matmul_peak(device, dtype, size=None, seconds=0.5):
  """FLOP/s of one square matmul of `dtype` on `device`, best of a few timed runs: the
  denominator of MFU (what this device and TensorFlow reach, not a data-sheet number)."""
  on_gpu = "GPU" in device.upper()
  size = size or (8192 if on_gpu else 1024)
  with tf.device(device):
    a = tf.random.stateless_normal([size, size], seed=[1, 2], dtype=tf.float32)
    a = tf.cast(a, dtype)
    b = tf.cast(tf.random.stateless_normal([size, size], seed=[3, 4]), dtype)

    @tf.function
    def chain(x, y):
      # Several dependent products per call so the launch cost is amortised.
      for _ in range(4):
        x = tf.matmul(x, y) * tf.cast(1.0 / size, dtype)
      return tf.reduce_sum(tf.cast(x[:1, :1], tf.float32))

    chain(a, b).numpy()  # trace and warm up
    best, deadline = float("inf"), time.perf_counter() + seconds
    for _ in range(20):
      start = time.perf_counter()
      chain(a, b).numpy()
      best = min(best, time.perf_counter() - start)
      if time.perf_counter() > deadline:
        break
  return 4 * 2 * size**3 / best


class Meter:
  """Sums tokens and FLOPs between progress lines; reports tokens/s and MFU."""

  def __init__(self, peak_flops):
    self.peak_flops = peak_flops
    self.reset()

  def reset(self):
    self.start, self.tokens, self.flops = time.time(), 0.0, 0.0

  def add(self, tokens, step_flops):
    self.tokens += tokens
    self.flops += step_flops

  def read(self):
    """(tokens per second, MFU) since the last reset."""
    elapsed = max(time.time() - self.start, 1e-9)
    return self.tokens / elapsed, self.flops / elapsed / self.peak_flops


def meter_for(strategy: tf.distribute.Strategy, compute_dtype: str) -> Meter:
  """A Meter whose peak is the matmul peak measured on the first training device (times the
  local GPUs; split CPU "replicas" share one CPU)."""
  device = strategy.extended.worker_devices[0]
  peak = measure_matmul_peak(device, compute_dtype)
  devices = len(strategy.extended.worker_devices) if "GPU" in device.upper() else 1
  logging.info(
    "%s matmul peak on %s: %.1f TFLOP/s (x%d devices: the MFU denominator)",
    compute_dtype,
    device,
    peak / 1e12,
    devices,
  )
  return Meter(peak * devices)
