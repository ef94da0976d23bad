"""The paper's learning-rate schedule (section 5.3)."""

import keras
import tensorflow as tf


def noam_learning_rate(step, d_model, warmup_steps=4000, scale=1.0):
  """lrate = scale * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), with step counted from 1."""
  step = tf.cast(step, tf.float32) + 1.0
  warmup = tf.cast(warmup_steps, tf.float32)
  return scale * tf.math.rsqrt(tf.cast(d_model, tf.float32)) * tf.minimum(
      tf.math.rsqrt(step), step * warmup**-1.5)


class NoamSchedule(keras.optimizers.schedules.LearningRateSchedule):
  """`noam_learning_rate` as an optimizer schedule (the optimizer calls it with its step)."""

  def __init__(self, d_model, warmup_steps=4000, scale=1.0):
    self.d_model, self.warmup_steps, self.scale = d_model, warmup_steps, scale

  def __call__(self, step):
    return noam_learning_rate(step, self.d_model, self.warmup_steps, self.scale)

  def get_config(self):
    return {"d_model": self.d_model, "warmup_steps": self.warmup_steps, "scale": self.scale}
