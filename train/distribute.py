"""Devices: the tf.distribute strategy, and the XLA and precision defaults of this machine."""

import json
import os

import tensorflow as tf
from absl import logging

from train.flag_choices import CPU_STEPS_PER_LOOP, GPU_STEPS_PER_LOOP, STRATEGIES

# Memory left to TensorFlow's own use and other processes when a GPU is split.
_SPLIT_GPU_SHARE = 0.9
_FALLBACK_GPU_MB = 16384


def split_cpu(replicas):
  """Splits the host CPU into `replicas` logical devices (before TF initialises its devices),
  so mirrored training can be run and tested on a machine without GPUs."""
  if replicas <= 1:
    return
  cpu = tf.config.list_physical_devices("CPU")[0]
  tf.config.set_logical_device_configuration(
    cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(replicas)]
  )


def check_gpu_replicas(replicas):
  """Raises ValueError, before anything is built, when --gpu_replicas asks for a split that
  this machine cannot make."""
  if replicas <= 1:
    return
  gpus = tf.config.list_physical_devices("GPU")
  if not gpus:
    raise ValueError(
      f"--gpu_replicas={replicas} splits a GPU, but TensorFlow sees none on this machine; "
      "use --cpu_replicas to split the CPU"
    )
  if len(gpus) > 1:
    raise ValueError(
      f"--gpu_replicas={replicas} splits one GPU, but this machine has {len(gpus)}: "
      "mirrored training already uses them all (leave --gpu_replicas unset)"
    )


def _gpu_memory_mb():
  """The first GPU's memory in MiB, from nvidia-smi (TensorFlow cannot tell before it
  initialises the device, and the split must come before that); None if unknown."""
  import subprocess

  try:
    answer = subprocess.run(
      ["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits", "-i", "0"],
      capture_output=True,
      text=True,
      timeout=20,
    )
    return int(answer.stdout.split()[0]) if answer.returncode == 0 else None
  except (OSError, ValueError, IndexError, subprocess.SubprocessError):
    return None


def split_gpu(replicas):
  """Splits the one GPU into `replicas` logical GPUs, each with an equal share of its memory
  (before TF initialises its devices): mirrored training, all-reduce included, on a one-GPU
  machine."""
  check_gpu_replicas(replicas)
  if replicas <= 1:
    return
  total = _gpu_memory_mb()
  if total is None:
    logging.warning("GPU memory unknown (no nvidia-smi): %d MiB per logical GPU", _FALLBACK_GPU_MB)
    each = _FALLBACK_GPU_MB
  else:
    each = int(total * _SPLIT_GPU_SHARE / replicas)
  gpu = tf.config.list_physical_devices("GPU")[0]
  tf.config.set_logical_device_configuration(
    gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=each) for _ in range(replicas)]
  )
  logging.info("split the GPU into %d logical GPUs of %d MiB each", replicas, each)


def make_strategy(name="auto", cpu_replicas=0, gpu_replicas=0):
  """auto: multi-worker when TF_CONFIG names several workers, mirrored over all GPUs (or the
  split CPU or GPU), else a single device."""
  if name not in STRATEGIES:
    raise ValueError(f"--strategy must be one of {STRATEGIES}, got {name!r}")
  tf_config = json.loads(os.environ.get("TF_CONFIG", "{}") or "{}")
  multi_worker = len(tf_config.get("cluster", {}).get("worker", [])) > 1
  if name == "multi_worker" or (name == "auto" and multi_worker):
    if not tf_config:
      raise ValueError("--strategy=multi_worker needs the TF_CONFIG environment variable")
    split_gpu(gpu_replicas)
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
  else:
    split_cpu(cpu_replicas)
    split_gpu(gpu_replicas)
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


def default_steps_per_loop(steps_per_loop):
  """An unset --steps_per_loop: many on a GPU, what measured best on a CPU."""
  if steps_per_loop is not None:
    return steps_per_loop
  return GPU_STEPS_PER_LOOP if tf.config.list_physical_devices("GPU") else CPU_STEPS_PER_LOOP


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
