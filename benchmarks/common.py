"""Shared benchmark helpers: timing, texts, the device. The project is installed (`make` runs
`pip install -e .`), so `tfattn`, `train` and `serving` import from here.

A benchmark starts TensorFlow with `cli.start_tensorflow_quietly()` (no cuInit noise on machines
without a GPU): in `main`, once its flags are good, unless it imports TensorFlow at the top."""

import os
import time


def timed(fn, repeats, warm_up=True):
  """Seconds per call of fn() (which must block until its result is ready), after one call."""
  if warm_up:
    fn()
  start = time.perf_counter()
  for _ in range(repeats):
    fn()
  return (time.perf_counter() - start) / repeats


def read_texts(path):
  """Request texts from a file: one a line, the first column of a TSV, blank lines skipped."""
  with open(path, encoding="utf-8") as f:
    return [line.rstrip("\n").split("\t")[0] for line in f if line.strip()]


def device_description():
  import tensorflow as tf

  gpus = tf.config.list_physical_devices("GPU")
  if gpus:
    return f"{len(gpus)} GPU(s): " + ", ".join(
      tf.config.experimental.get_device_details(g).get("device_name", g.name) for g in gpus
    )
  return f"CPU only, {os.cpu_count()} cores"


def interleaved_medians(functions, rounds, repeats):
  """{name: median seconds per call}, timing the functions in turn, round after round, so a
  noisy machine slows all of them alike. Each function is called once first (compilation)."""
  import statistics

  for fn in functions.values():
    fn()
  samples = {name: [] for name in functions}
  for _ in range(rounds):
    for name, fn in functions.items():
      samples[name].append(timed(fn, repeats, warm_up=False))
  return {name: statistics.median(values) for name, values in samples.items()}
