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
    int32 `[batch, length]`: 0, 1, 2, ... within each segment (padding counts from where it
    begins; it is masked).
  """
  segment_ids = tf.convert_to_tensor(segment_ids)
  shape = tf.shape(segment_ids)
  index = tf.broadcast_to(tf.range(shape[1]), shape)
  starts = tf.concat(
    [tf.ones_like(segment_ids[:, :1], tf.bool), segment_ids[:, 1:] != segment_ids[:, :-1]], 1
  )
  # Each position minus the index where its run began. Runs are numbered 1, 2, ... along each
  # row (any ids work, only neighbours must differ) and apart across rows, so one segment-min
  # over every row at once finds each run's first index: no loop over the length.
  run = tf.cumsum(tf.cast(starts, tf.int32), axis=1) + tf.range(shape[0])[:, tf.newaxis] * shape[1]
  run_start = tf.math.unsorted_segment_min(index, run, shape[0] * shape[1] + 1)
  return index - tf.gather(run_start, run)


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

  def at(self, positions: tf.Tensor, limit=None) -> tf.Tensor:
    """int `[batch, length]` positions (each row its own, e.g. a left-padded prompt's) ->
    float32 `[batch, length, d_model]` encodings. With `limit` (a bound every position is
    below, e.g. a packed row's length), the encodings of 0..limit-1 are computed once and
    looked up: sines and cosines of `[limit, d_model]` rather than of every token."""
    if limit is not None:
      return tf.gather(sinusoidal_encoding(tf.range(limit), self.d_model), positions)
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

  def at(self, positions: tf.Tensor, limit=None) -> tf.Tensor:
    """int `[batch, length]` positions (each row its own) -> `[batch, length, d_model]` rows of
    the table (`limit`, a bound on the positions, changes nothing: this is a lookup already)."""
    del limit
    return tf.gather(self.table, positions)
