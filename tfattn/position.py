"""Position information: fixed sinusoids (paper section 3.5) or a learned table."""

import math

import tensorflow as tf


def sinusoidal_encoding(positions, d_model):
  """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d)).

  Sines and cosines are interleaved as in the paper, so `d_model` may be odd or even.

  Args:
    positions: int or float `[length]`.
  Returns:
    float32 `[length, d_model]`.
  """
  positions = tf.cast(positions, tf.float32)[:, tf.newaxis]
  dims = tf.range(d_model)
  even_dims = tf.cast(dims - dims % 2, tf.float32)
  inv_freq = tf.exp(-math.log(10000.0) * even_dims / float(d_model))
  angles = positions * inv_freq[tf.newaxis, :]
  return tf.where(tf.equal(dims % 2, 0)[tf.newaxis, :], tf.sin(angles), tf.cos(angles))


class SinusoidalPosition(tf.Module):
  """Adds fixed sinusoidal encodings; no variables, any length."""

  def __init__(self, d_model, name=None):
    super().__init__(name=name)
    self.d_model = d_model

  def __call__(self, x, offset=0):
    """x: `[batch, length, d_model]`; offset: position of x's first token (decoding)."""
    positions = tf.range(tf.shape(x)[1]) + offset
    return x + tf.cast(sinusoidal_encoding(positions, self.d_model), x.dtype)[tf.newaxis]


class LearnedPosition(tf.Module):
  """Adds a trained `[max_length, d_model]` table."""

  def __init__(self, max_length, d_model, seed=0, name=None):
    super().__init__(name=name)
    self.max_length = max_length
    with self.name_scope:
      init = tf.random.stateless_normal([max_length, d_model], seed=[seed, 7], stddev=0.02)
      self.table = tf.Variable(init, name="table")

  def __call__(self, x, offset=0):
    """x: `[batch, length, d_model]`; positions must stay below `max_length`."""
    positions = tf.range(tf.shape(x)[1]) + offset
    return x + tf.cast(tf.gather(self.table, positions), x.dtype)[tf.newaxis]
