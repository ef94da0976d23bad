"""Throughput and model FLOP utilisation (MFU) for the progress line: analytic training FLOPs
(`tfattn.flops`) over a matmul peak measured once, at start, on the training device."""

import statistics
import time

import tensorflow as tf
from absl import logging

# Timed calls of the peak measurement: at least this many, the median taken. A GPU call takes
# milliseconds; a CPU call ~0.1 s of a run's start (three keep one slowed call from deciding).
_PEAK_REPEATS = 7
_CPU_PEAK_REPEATS = 3


def measure_matmul_peak(device, dtype, size=None, seconds=None, repeats=None):
  """FLOP/s of one square matmul of `dtype` on `device`: the median of at least `repeats`
  timed calls (and as many more as fit in `seconds`, up to 50), so one call slowed by another
  process does not decide it. The denominator of MFU (what this device and TensorFlow reach,
  not a data-sheet number); always > 0. By default a GPU is timed for 0.5 s, a CPU 3 calls."""
  on_gpu = "GPU" in device.upper()
  size = size or (8192 if on_gpu else 1024)
  if seconds is None:
    seconds = 0.5 if on_gpu else 0.0
  if repeats is None:
    repeats = _PEAK_REPEATS if on_gpu else _CPU_PEAK_REPEATS
  with tf.device(device):
    a = tf.random.stateless_normal([size, size], seed=[1, 2], dtype=tf.float32)
    a = tf.cast(a, dtype)
    b = tf.cast(tf.random.stateless_normal([size, size], seed=[3, 4]), dtype)

    @tf.function(autograph=False)
    def chain(x, y):
      # Several dependent products per call so the launch cost is amortised.
      for _ in range(4):
        x = tf.matmul(x, y) * tf.cast(1.0 / size, dtype)
      return tf.reduce_sum(tf.cast(x[:1, :1], tf.float32))

    chain(a, b).numpy()  # trace and warm up
    samples, deadline = [], time.perf_counter() + seconds
    while len(samples) < repeats or (time.perf_counter() < deadline and len(samples) < 50):
      start = time.perf_counter()
      chain(a, b).numpy()
      samples.append(time.perf_counter() - start)
  # A clock too coarse for the call would give 0 s: never divide by it.
  return 4 * 2 * size**3 / max(statistics.median(samples), 1e-9)


def format_flops(flops_per_second: float) -> str:
  """'312 TFLOP/s', '45.3 GFLOP/s': three significant digits in a unit that fits."""
  for unit, scale in (("PFLOP/s", 1e15), ("TFLOP/s", 1e12), ("GFLOP/s", 1e9)):
    if flops_per_second >= scale:
      return f"{flops_per_second / scale:.3g} {unit}"
  return f"{flops_per_second / 1e6:.3g} MFLOP/s"


def format_mfu(mfu: float) -> str:
  """Three significant digits, so a small model's MFU is not printed as 0.000: '0.412',
  '0.0031', '4.7e-05'; above 1 it says the peak was measured low: '1.230 (above the measured
  peak)'."""
  text = f"{mfu:.2g}" if mfu < 1e-4 else f"{mfu:.3g}" if mfu < 0.01 else f"{mfu:.3f}"
  return f"{text} (above the measured peak)" if mfu > 1 else text


class Meter:
  """Sums tokens and FLOPs between progress lines; reports tokens/s and MFU.

  MFU is the FLOP/s reached over the peak. When the model reaches more than the peak measured
  at start (measured while another process held the device), the peak is measured again
  (`remeasure`, once) and the higher one kept, said in the log; an MFU still above 1 is
  reported as it is, never clamped to 1 (which read as a perfect run and hid the low peak).

  Args:
    peak_flops: the peak measured at start (FLOP/s).
    remeasure: () -> FLOP/s, measures the peak again; None: never.
  """

  def __init__(self, peak_flops, remeasure=None):
    self.peak_flops = peak_flops
    self.remeasure = remeasure
    self.reset()

  def reset(self):
    self.start, self.tokens, self.flops = time.time(), 0.0, 0.0

  def add(self, tokens, step_flops):
    self.tokens += tokens
    self.flops += step_flops

  def read(self):
    """(tokens per second, MFU) since the last reset."""
    elapsed = max(time.time() - self.start, 1e-9)
    reached = self.flops / elapsed
    if reached > self.peak_flops and self.remeasure is not None:
      measured, self.remeasure = self.remeasure(), None
      logging.info(
        "the model reached %s, above the matmul peak measured at start (%s: measured under "
        "load?); measured again now: %s, the MFU denominator from here on%s",
        format_flops(reached),
        format_flops(self.peak_flops),
        format_flops(measured),
        "" if measured >= reached else " (MFU above 1 means the peak is still measured low)",
      )
      self.peak_flops = max(self.peak_flops, measured)
    return self.tokens / elapsed, reached / self.peak_flops


# The highest peak this process has measured for each (device, dtype): Trainers built one after
# another in one process (a sweep, a notebook, the tests) time their device once, not each
# (~0.4 CPU s a Trainer on a CPU).
_peaks = {}


def _peak(device: str, dtype: str, again: bool = False) -> float:
  """The peak of `dtype` matmuls on `device`: measured the first time (or `again`), else the
  highest measured so far in this process."""
  key = (device, dtype)
  if again or key not in _peaks:
    _peaks[key] = max(_peaks.get(key, 0.0), measure_matmul_peak(device, dtype))
  return _peaks[key]


def meter_for(strategy: tf.distribute.Strategy, compute_dtype: str) -> Meter:
  """A Meter whose peak is the matmul peak measured on the first training device (times the
  local GPUs; split CPU "replicas" share one CPU, and so do logical GPUs of one card)."""
  device = strategy.extended.worker_devices[0]
  peak = _peak(device, compute_dtype)
  devices = 1
  if "GPU" in device.upper():
    devices = len({_physical_gpu(d) for d in strategy.extended.worker_devices})
  logging.info(
    "%s matmul peak on %s: %s (x%d devices: the MFU denominator)",
    compute_dtype,
    device,
    format_flops(peak),
    devices,
  )
  return Meter(peak * devices, lambda: _peak(device, compute_dtype, again=True) * devices)


def _physical_gpu(logical_device: str) -> str:
  """The physical GPU a logical one lives on (--gpu_replicas splits one card into several)."""
  physical = tf.config.list_physical_devices("GPU")
  if len(physical) == 1:
    return physical[0].name
  return logical_device
