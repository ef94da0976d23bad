"""The device section: where and in what precision the run computes. Every setting follows the
machine a run resumes on (`train/distribute.py`)."""

import dataclasses
from typing import Optional

from train.flag_choices import STRATEGIES
from train.sections.declare import FOLLOWS_MACHINE, run_setting

PRECISIONS = ("auto", "float32", "mixed_float16", "mixed_bfloat16")
COMPUTE_DTYPES = {"float32": "float32", "mixed_float16": "float16", "mixed_bfloat16": "bfloat16"}


@dataclasses.dataclass(frozen=True)
class Device:
  """The device section."""

  mixed_precision: str = run_setting(
    "auto",
    "Compute dtype (variables stay float32; float16 uses loss scaling); auto: "
    "bfloat16 on GPUs that have it (compute capability >= 8.0), else float32.",
    choices=PRECISIONS,
    resume=FOLLOWS_MACHINE,
  )
  jit_compile: Optional[bool] = run_setting(
    None,
    "Compile the train step with XLA (batches padded to a few length buckets, one "
    "program each); --nojit_compile: off.",
    unset="on when a GPU is present",
    resume=FOLLOWS_MACHINE,
  )
  deterministic: bool = run_setting(
    False,
    "Enable TF op determinism (bitwise-reproducible runs and resumes).",
    resume=FOLLOWS_MACHINE,
  )
  strategy: str = run_setting(
    "auto",
    "auto: multi_worker if TF_CONFIG lists several workers, else mirrored over all "
    "GPUs (or the split CPU), else one_device.",
    choices=STRATEGIES,
    resume=FOLLOWS_MACHINE,
  )
  cpu_replicas: int = run_setting(
    0,
    "Split the CPU into N logical devices (mirrored training without GPUs).",
    minimum=0,
    resume=FOLLOWS_MACHINE,
  )
  gpu_replicas: int = run_setting(
    0,
    "Split the one GPU into N logical GPUs (mirrored training, and its tests, on a one-GPU "
    "machine).",
    minimum=0,
    resume=FOLLOWS_MACHINE,
  )

  @property
  def compute_dtype(self) -> str:
    """The model's compute dtype ("auto" not resolved yet: float32)."""
    return COMPUTE_DTYPES.get(self.mixed_precision, "float32")

  @property
  def loss_scaled(self) -> bool:
    return self.mixed_precision == "mixed_float16"

  def check(self) -> None:
    if self.cpu_replicas > 1 and self.gpu_replicas > 1:
      raise ValueError("--cpu_replicas and --gpu_replicas each split a device: give one of them")
