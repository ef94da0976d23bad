"""Devices: the tf.distribute strategy, and the XLA and precision defaults of this machine."""

import json
import os

import tensorflow as tf
from absl import logging

STRATEGIES = ("auto", "mirrored", "multi_worker", "one_device")


def split_cpu(replicas):
  """Splits the host CPU into `replicas` logical devices (before TF initialises its devices),
  so mirrored training can be run and tested on a machine without GPUs."""
  if replicas <= 1:
    return
  cpu = tf.config.list_physical_devices("CPU")[0]
  tf.config.set_logical_device_configuration(
    cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(replicas)]
  )


def make_strategy(name="auto", cpu_replicas=0):
  """auto: multi-worker when TF_CONFIG names several workers, mirrored over all GPUs (or the
  split CPU), else a single device."""
  if name not in STRATEGIES:
    raise ValueError(f"--strategy must be one of {STRATEGIES}, got {name!r}")
  tf_config = json.loads(os.environ.get("TF_CONFIG", "{}") or "{}")
  multi_worker = len(tf_config.get("cluster", {}).get("worker", [])) > 1
  if name == "multi_worker" or (name == "auto" and multi_worker):
    if not tf_config:
      raise ValueError("--strategy=multi_worker needs the TF_CONFIG environment variable")
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
  else:
    split_cpu(cpu_replicas)
    gpus = tf.config.list_logical_devices("GPU")
    devices = (
      [d.name for d in gpus] if gpus else [d.name for d in tf.config.list_logical_devices("CPU")]
    )
    if name == "one_device" or (name == "auto" and len(devices) == 1):
      strategy = tf.distribute.OneDeviceStrategy(devices[0])
    else:
      strategy = tf.distribute.MirroredStrategy(devices)
  logging.info(
    "strategy %s with %d replica(s)", type(strategy).__name__, strategy.num_replicas_in_sync
  )
  return strategy


def _gpus_support_bfloat16(gpus):
  for gpu in gpus:
    capability = tf.config.experimental.get_device_details(gpu).get("compute_capability")
    if not capability or tuple(capability) < (8, 0):  # bf16 tensor cores: Ampere and later
      return False
  return True


def resolve_device_defaults(jit_compile, mixed_precision):
  """(jit_compile, mixed_precision) for this machine: an unset `jit_compile` and
  `mixed_precision="auto"` mean XLA and bfloat16 on GPUs that run them well, plain float32
  graphs on CPUs."""
  gpus = tf.config.list_physical_devices("GPU")
  jit_compile = bool(gpus) if jit_compile is None else jit_compile
  if mixed_precision == "auto":
    mixed_precision = "mixed_bfloat16" if gpus and _gpus_support_bfloat16(gpus) else "float32"
  return jit_compile, mixed_precision


def is_chief(strategy):
  resolver = getattr(strategy, "cluster_resolver", None)
  if resolver is None or not resolver.cluster_spec().as_dict():
    return True
  return resolver.task_type in ("chief", None) or (
    resolver.task_type == "worker"
    and resolver.task_id == 0
    and "chief" not in resolver.cluster_spec().as_dict()
  )
