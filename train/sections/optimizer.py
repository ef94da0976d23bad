"""The optimizer section: the optimizer, its learning-rate schedule, the loss and the gradient
(`train/optimizer.py`)."""

import dataclasses
from typing import Optional

from train.sections.declare import MUST_MATCH, run_setting

SCHEDULES = ("noam", "rsqrt", "cosine", "constant")
OPTIMIZERS = ("adam", "adamw")
FREEZE_CHOICES = ("none", "embeddings", "encoder")


@dataclasses.dataclass(frozen=True)
class Optimizer:
  """The optimizer section."""

  name: Optional[str] = run_setting(
    None,
    "adam: Adam (beta_1 0.9, epsilon 1e-9: the paper's); adamw: the same with decoupled "
    "weight decay (--weight_decay) on weight matrices and embedding tables, not on biases or "
    "layer-norm parameters (nanoGPT's rule).",
    choices=OPTIMIZERS,
    when_unset="adam",
    flag="optimizer",
    resume=MUST_MATCH,
  )
  schedule: Optional[str] = run_setting(
    None,
    "Learning-rate schedule: noam (the paper's; peak depends on d_model), or a linear "
    "warm-up to --learning_rate then rsqrt decay, cosine decay to 0, or constant.",
    choices=SCHEDULES,
    when_unset="noam",
    resume=MUST_MATCH,
  )
  learning_rate: Optional[float] = run_setting(
    None,
    "noam: scale on the schedule; rsqrt/cosine/constant: the peak learning rate.",
    above=0,
    resume=MUST_MATCH,
  )
  warmup_steps: Optional[int] = run_setting(None, "Warm-up steps.", minimum=0, resume=MUST_MATCH)
  min_learning_rate: Optional[float] = run_setting(
    None,
    "--schedule=cosine: where the cosine decay ends (nanoGPT's min_lr, a tenth of the peak); "
    "below --learning_rate.",
    minimum=0,
    when_unset=0.0,
    resume=MUST_MATCH,
  )
  weight_decay: Optional[float] = run_setting(
    None,
    "--optimizer=adamw: the decoupled weight decay, applied as lr * weight_decay * weight each "
    "step (nanoGPT: 0.1).",
    minimum=0,
    when_unset=0.0,
    resume=MUST_MATCH,
  )
  adam_beta2: Optional[float] = run_setting(
    None,
    "Adam's second-moment decay beta_2 (the paper: 0.98; nanoGPT's small character model: 0.99).",
    above=0,
    below=1,
    when_unset=0.98,
    resume=MUST_MATCH,
  )
  label_smoothing: Optional[float] = run_setting(
    None, "Label smoothing epsilon.", minimum=0, below=1, when_unset=0.1, resume=MUST_MATCH
  )
  clip_norm: Optional[float] = run_setting(
    None,
    "Global gradient-norm clip; 0 disables.",
    minimum=0,
    when_unset=0.0,  # unset until resolved, so a recipe can set it
    resume=MUST_MATCH,
  )
  freeze: Optional[str] = run_setting(
    None,
    "Variables that do not train: embeddings (the token tables, the tied output included) or "
    "encoder (the whole encoder, its embedding included: with a shared vocabulary the "
    "decoder's too).",
    choices=FREEZE_CHOICES,
    when_unset="none",
    resume=MUST_MATCH,
  )

  def check(self, loss_scaled: bool) -> None:
    """`loss_scaled`: the run computes in float16 (its gradients are loss-scaled)."""
    if self.clip_norm and loss_scaled:
      raise ValueError(
        "--clip_norm with --mixed_precision=mixed_float16 is not supported "
        "(clipping would see loss-scaled gradients); use mixed_bfloat16"
      )
    if self.weight_decay and self.name == "adam":
      raise ValueError("--weight_decay needs --optimizer=adamw (Adam has no weight decay)")
    if self.min_learning_rate and self.schedule not in (None, "cosine"):
      raise ValueError(
        f"--min_learning_rate is where --schedule=cosine ends, not --schedule={self.schedule}"
      )
    low, peak = self.min_learning_rate, self.learning_rate
    if low and peak is not None and low >= peak:
      raise ValueError(f"--min_learning_rate ({low}) must be below --learning_rate ({peak})")
