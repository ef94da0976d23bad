"""Shared benchmark helpers: repo on sys.path, quiet TF, timing."""

import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def timed(fn, repeats):
  """Seconds per call of fn() (which must block until its result is ready), after one call."""
  fn()
  start = time.perf_counter()
  for _ in range(repeats):
    fn()
  return (time.perf_counter() - start) / repeats


def device_description():
  import tensorflow as tf
  gpus = tf.config.list_physical_devices("GPU")
  if gpus:
    return f"{len(gpus)} GPU(s): " + ", ".join(
        tf.config.experimental.get_device_details(g).get("device_name", g.name) for g in gpus)
  return f"CPU only, {os.cpu_count()} cores"
