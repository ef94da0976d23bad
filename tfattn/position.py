"""Position information: fixed sinusoids (paper section 3.5) or a learned table."""

import math
from typing import Optional

import tensorflow as tf

LAYOUTS = ("interleaved", "halves")


def sinusoidal_encoding(
  positions: tf.Tensor, d_model: int, layout: str = "interleaved"
) -> tf.Tensor:
  """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d)).

  layout="interleaved": sines and cosines side by side as in the paper (`d_model` odd or even).
  layout="halves": `[sin | cos]`, the ceil(d/2) sines of frequencies 10000^(-2i/d) first, then
  the floor(d/2) cosines (Marian's and fairseq's layout: transformers'
  `MarianSinusoidalPositionalEmbedding.create_weight`), computed in float64 as it computes
  them, then cast.

  Args:
    positions: int or float `[length]`.
    d_model: the encoding's width.
    layout: "interleaved" or "halves".
  Returns:
    float32 `[length, d_model]`.
  """
  if layout == "halves":
    return _halves(positions, d_model)
  if layout != "interleaved":
    raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
  positions = tf.cast(positions, tf.float32)[:, tf.newaxis]
  dims = tf.range(d_model)
  even_dims = tf.cast(dims - dims % 2, tf.float32)
  inv_freq = tf.exp(-math.log(10000.0) * even_dims / float(d_model))
  angles = positions * inv_freq[tf.newaxis, :]
  return tf.where(tf.equal(dims % 2, 0)[tf.newaxis, :], tf.sin(angles), tf.cos(angles))


def _halves(positions: tf.Tensor, d_model: int) -> tf.Tensor:
  """`[sin | cos]` encodings float32 `[length, d_model]` of int or float `[length]` positions."""
  positions = tf.cast(positions, tf.float64)[:, tf.newaxis]  # [length, 1]
  sines = tf.range((d_model + 1) // 2, dtype=tf.float64)  # frequency index i of each sine
  cosines = tf.range(d_model // 2, dtype=tf.float64)
  # pos / 10000^(2i/d), with the power taken as numpy takes it (float64 pow, then a division).
  sin_angles = positions / tf.pow(tf.constant(10000.0, tf.float64), 2.0 * sines / d_model)
  cos_angles = positions / tf.pow(tf.constant(10000.0, tf.float64), 2.0 * cosines / d_model)
  return tf.cast(tf.concat([tf.sin(sin_angles), tf.cos(cos_angles)], axis=1), tf.float32)


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
    layout: "interleaved" (the paper's) or "halves" (`[sin | cos]`, Marian's).
  """

  def __init__(self, d_model: int, name: Optional[str] = None, layout: str = "interleaved"):
    super().__init__(name=name)
    if layout not in LAYOUTS:
      raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    self.d_model = d_model
    self.layout = layout

  def _encoding(self, positions):
    return sinusoidal_encoding(positions, self.d_model, self.layout)

  def __call__(self, x: tf.Tensor, offset=0) -> tf.Tensor:
    """x: `[batch, length, d_model]`; offset: position of x's first token (decoding)."""
    positions = tf.range(tf.shape(x)[1]) + offset
    return x + tf.cast(self._encoding(positions), x.dtype)[tf.newaxis]

  def at(self, positions: tf.Tensor, limit=None) -> tf.Tensor:
    """int `[batch, length]` positions (each row its own, e.g. a left-padded prompt's) ->
    float32 `[batch, length, d_model]` encodings. With `limit` (a bound every position is
    below, e.g. a packed row's length), the encodings of 0..limit-1 are computed once and
    looked up: sines and cosines of `[limit, d_model]` rather than of every token."""
    if limit is not None:
      return tf.gather(self._encoding(tf.range(limit)), positions)
    flat = self._encoding(tf.reshape(positions, [-1]))
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
