"""Position information: fixed sinusoids (paper section 3.5) or a learned table."""

import math
from typing import Optional

import tensorflow as tf


def sinusoidal_encoding(positions: tf.Tensor, d_model: int) -> tf.Tensor:
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


def segment_positions(segment_ids: tf.Tensor) -> tf.Tensor:
  """Positions that restart at 0 at each segment of a packed row.

  Args:
    segment_ids: int `[batch, length]`, 1, 2, ... per example, 0 for padding; each segment is
      one contiguous run.
  Returns:
    int32 `[batch, length]`: 0, 1, 2, ... within each segment (padding counts on; it is
    masked).
  """
  segment_ids = tf.convert_to_tensor(segment_ids)
  length = tf.shape(segment_ids)[1]
  index = tf.broadcast_to(tf.range(length), tf.shape(segment_ids))
  starts = tf.concat(
    [tf.ones_like(segment_ids[:, :1], tf.bool), segment_ids[:, 1:] != segment_ids[:, :-1]], 1
  )
  # Each position minus the index where its segment began (a running max of start indices).
  start_index = tf.where(starts, index, tf.zeros_like(index))
  start_index = tf.scan(tf.maximum, tf.transpose(start_index))
  return index - tf.transpose(start_index)


class SinusoidalPosition(tf.Module):
  """Adds fixed sinusoidal encodings; no variables, any length.

  Args:
    d_model: width of the encodings (and of the inputs they are added to).
    name: module name.
  """

  def __init__(self, d_model: int, name: Optional[str] = None):
    super().__init__(name=name)
    self.d_model = d_model

  def __call__(self, x: tf.Tensor, offset=0) -> tf.Tensor:
    """x: `[batch, length, d_model]`; offset: position of x's first token (decoding)."""
    positions = tf.range(tf.shape(x)[1]) + offset
    return x + tf.cast(sinusoidal_encoding(positions, self.d_model), x.dtype)[tf.newaxis]

  def at(self, positions: tf.Tensor) -> tf.Tensor:
    """int `[batch, length]` positions (each row its own, e.g. a left-padded prompt's) ->
    float32 `[batch, length, d_model]` encodings."""
    flat = sinusoidal_encoding(tf.reshape(positions, [-1]), self.d_model)
    return tf.reshape(flat, tf.concat([tf.shape(positions), [self.d_model]], 0))


class LearnedPosition(tf.Module):
  """Adds a trained `[max_length, d_model]` table.

  Args:
    max_length: rows of the table; positions must stay below it.
    d_model: width of each row.
    seed: seed of the normal(0, 0.02) initialisation.
    name: module name.
  """

  def __init__(self, max_length: int, d_model: int, seed: int = 0, name: Optional[str] = None):
    super().__init__(name=name)
    self.max_length = max_length
    with self.name_scope:
      init = tf.random.stateless_normal([max_length, d_model], seed=[seed, 7], stddev=0.02)
      self.table = tf.Variable(init, name="table")

  def __call__(self, x: tf.Tensor, offset=0) -> tf.Tensor:
    """x: `[batch, length, d_model]`; positions must stay below `max_length`."""
    positions = tf.range(tf.shape(x)[1]) + offset
    return x + tf.cast(tf.gather(self.table, positions), x.dtype)[tf.newaxis]

  def at(self, positions: tf.Tensor) -> tf.Tensor:
    """int `[batch, length]` positions (each row its own) -> `[batch, length, d_model]` rows of
    the table."""
    return tf.gather(self.table, positions)
