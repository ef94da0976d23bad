"""Learning-rate schedules: the paper's (section 5.3, peak tied to d_model) and warm-up schedules
whose peak is set directly."""

import math

import keras
import tensorflow as tf


def noam_learning_rate(step, d_model, warmup_steps=4000, scale=1.0):
  """lrate = scale * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), with step counted from 1."""
  step = tf.cast(step, tf.float32) + 1.0
  warmup = tf.cast(warmup_steps, tf.float32)
  return (
    scale
    * tf.math.rsqrt(tf.cast(d_model, tf.float32))
    * tf.minimum(tf.math.rsqrt(step), step * warmup**-1.5)
  )


class NoamSchedule(keras.optimizers.schedules.LearningRateSchedule):
  """`noam_learning_rate` as an optimizer schedule (the optimizer calls it with its step).

  Args:
    d_model: the model width (the peak is d_model^-0.5 * warmup_steps^-0.5 * scale).
    warmup_steps: steps of linear warm-up before the rsqrt decay.
    scale: multiplies the whole schedule.
  """

  def __init__(self, d_model: int, warmup_steps: int = 4000, scale: float = 1.0):
    self.d_model, self.warmup_steps, self.scale = d_model, warmup_steps, scale

  def __call__(self, step):
    return noam_learning_rate(step, self.d_model, self.warmup_steps, self.scale)

  def get_config(self):
    return {"d_model": self.d_model, "warmup_steps": self.warmup_steps, "scale": self.scale}


WARMUP_DECAYS = ("rsqrt", "cosine", "constant")


def _check_warmup(peak, decay, floor):
  if decay not in WARMUP_DECAYS:
    raise ValueError(f"decay must be one of {WARMUP_DECAYS}, got {decay!r}")
  if floor and decay != "cosine":
    raise ValueError(f"a learning-rate floor applies to the cosine decay, not {decay!r}")
  if not 0.0 <= floor < peak:
    raise ValueError(f"the floor must be in [0, peak ({peak})), got {floor}")


def warmup_learning_rate(step, peak, warmup_steps, total_steps, decay="cosine", floor=0.0):
  """Linear warm-up to `peak` over `warmup_steps`, then `decay`: "rsqrt" (Noam's shape, peak
  set directly: peak * sqrt(warmup / step)), "cosine" (to `floor` at `total_steps`: nanoGPT's
  min_lr; 0 by default) or "constant". Steps count from 1 like `noam_learning_rate`."""
  _check_warmup(peak, decay, floor)
  step = tf.cast(step, tf.float32) + 1.0
  warmup = tf.maximum(tf.cast(warmup_steps, tf.float32), 1.0)
  total = tf.maximum(tf.cast(total_steps, tf.float32), warmup + 1.0)
  ramp = tf.minimum(step / warmup, 1.0)
  if decay == "rsqrt":
    after = tf.math.rsqrt(tf.maximum(step, warmup) / warmup)
  elif decay == "cosine":
    progress = tf.clip_by_value((step - warmup) / (total - warmup), 0.0, 1.0)
    after = 0.5 * (1.0 + tf.cos(math.pi * progress))
    if floor:  # from peak down to floor (without one, the expression below, bit for bit)
      return ramp * (floor + (peak - floor) * after)
  else:
    after = 1.0
  return peak * ramp * after


class WarmupSchedule(keras.optimizers.schedules.LearningRateSchedule):
  """`warmup_learning_rate` as an optimizer schedule.

  Args:
    peak: the learning rate reached at the end of the warm-up.
    warmup_steps: steps of linear warm-up from 0.
    total_steps: the last step (cosine decays to `floor` there).
    decay: "rsqrt", "cosine" or "constant" after the warm-up.
    floor: where the cosine decay ends (below `peak`); 0 for the other decays.
  """

  def __init__(
    self,
    peak: float,
    warmup_steps: int,
    total_steps: int,
    decay: str = "cosine",
    floor: float = 0.0,
  ):
    _check_warmup(peak, decay, floor)
    self.peak, self.warmup_steps, self.total_steps, self.decay, self.floor = (
      peak,
      warmup_steps,
      total_steps,
      decay,
      floor,
    )

  def __call__(self, step):
    return warmup_learning_rate(
      step, self.peak, self.warmup_steps, self.total_steps, self.decay, self.floor
    )

  def get_config(self):
    return {
      "peak": self.peak,
      "warmup_steps": self.warmup_steps,
      "total_steps": self.total_steps,
      "decay": self.decay,
      "floor": self.floor,
    }
