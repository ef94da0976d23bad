"""Additive attention biases: 0 where attention is allowed, a large negative where it is not.

Every bias broadcasts to `[batch, heads, q_len, k_len]`. Biases are combined with `tf.minimum`,
never by addition, so two masks can never sum past the dtype's range.
"""

import tensorflow as tf

from tfattn.special_ids import PAD_ID

# Large enough that exp(bias + logit) underflows to exactly 0 in float32, small enough to stay
# finite in the dtype the bias is built in (float16 tops out at 65504).
_LARGE_NEGATIVE = {tf.float32: -1e9, tf.bfloat16: -1e9, tf.float16: -3e4, tf.float64: -1e9}


def large_negative(dtype=tf.float32) -> float:
  """The masking value for `dtype`: finite in that dtype and in float32 softmax."""
  dtype = tf.as_dtype(dtype)
  if dtype not in _LARGE_NEGATIVE:
    raise ValueError(f"No masking value for dtype {dtype.name}; use a floating dtype")
  return _LARGE_NEGATIVE[dtype]


def padding_bias(ids: tf.Tensor, pad_id: int = PAD_ID, dtype: tf.DType = tf.float32) -> tf.Tensor:
  """Masks padding keys.

  Args:
    ids: int `[batch, k_len]` token ids.
  Returns:
    `[batch, 1, 1, k_len]` bias.
  """
  is_pad = tf.cast(tf.equal(ids, tf.cast(pad_id, ids.dtype)), dtype)
  return (is_pad * large_negative(dtype))[:, tf.newaxis, tf.newaxis, :]


def lengths_bias(lengths: tf.Tensor, max_length, dtype: tf.DType = tf.float32) -> tf.Tensor:
  """Masks keys at or beyond each sequence's length.

  Args:
    lengths: int `[batch]` valid lengths.
    max_length: scalar, the key length `k_len`.
  Returns:
    `[batch, 1, 1, k_len]` bias.
  """
  valid = tf.sequence_mask(lengths, max_length, dtype=dtype)
  return ((1.0 - valid) * large_negative(dtype))[:, tf.newaxis, tf.newaxis, :]


def causal_bias(length, dtype: tf.DType = tf.float32) -> tf.Tensor:
  """Masks keys after the query position (no peeking at the future).

  Returns:
    `[1, 1, length, length]` bias.
  """
  allowed = tf.linalg.band_part(tf.ones([length, length], dtype), -1, 0)
  return ((1.0 - allowed) * large_negative(dtype))[tf.newaxis, tf.newaxis, :, :]


def band_bias(length, window: int, causal: bool = False, dtype: tf.DType = tf.float32):
  """Masks keys outside restricted self-attention's window: |i - j| <= window, or
  0 <= i - j <= window when `causal`. Dense, O(length^2): the reference that the blocked
  `tfattn.local_attention` equals, and what its attention maps show.

  Returns:
    `[1, 1, length, length]` bias.
  """
  positions = tf.range(length)
  distance = positions[:, tf.newaxis] - positions[tf.newaxis, :]  # query - key
  allowed = (distance >= (0 if causal else -window)) & (distance <= window)
  allowed = tf.cast(allowed, dtype)
  return ((1.0 - allowed) * large_negative(dtype))[tf.newaxis, tf.newaxis, :, :]


def segment_bias(
  query_segments: tf.Tensor, key_segments: tf.Tensor, dtype: tf.DType = tf.float32
) -> tf.Tensor:
  """For packed rows (several examples in one row): a query sees only keys of its own segment.

  Segment ids number the examples of a row 1, 2, ...; 0 marks padding, which no query sees
  (a padding query sees nothing of another segment either; its output is never used).

  Args:
    query_segments: int `[batch, q_len]`.
    key_segments: int `[batch, k_len]`.
  Returns:
    `[batch, 1, q_len, k_len]` bias.
  """
  same = tf.equal(query_segments[:, :, tf.newaxis], key_segments[:, tf.newaxis, :])
  allowed = same & (key_segments[:, tf.newaxis, :] > 0)
  allowed = tf.cast(allowed, dtype)
  return ((1.0 - allowed) * large_negative(dtype))[:, tf.newaxis, :, :]


def step_bias(decode_index, cache_length, dtype: tf.DType = tf.float32) -> tf.Tensor:
  """For padded decoding: one query at `decode_index` may see cache slots `0..decode_index`.

  Returns:
    `[1, 1, 1, cache_length]` bias.
  """
  allowed = tf.cast(tf.range(cache_length) <= decode_index, dtype)
  return ((1.0 - allowed) * large_negative(dtype))[tf.newaxis, tf.newaxis, tf.newaxis, :]


def combine(*biases: tf.Tensor) -> tf.Tensor:
  """Combines biases by broadcasting `tf.minimum`; `None`s are skipped. Biases of one dtype
  keep it; mixed dtypes combine in float32, where every dtype's masking value is finite (a
  float32 -1e9 cast to float16 would be -inf, and a fully masked row would become NaN)."""
  present = [bias for bias in biases if bias is not None]
  if not present:
    return None
  if len({bias.dtype for bias in present}) > 1:
    present = [tf.cast(bias, tf.float32) for bias in present]
  combined = present[0]
  for bias in present[1:]:
    combined = tf.minimum(combined, bias)
  return combined


def any_key_allowed(bias: tf.Tensor) -> tf.Tensor:
  """float32 `[..., 1]`: 1 where a query of `bias` (`[..., k_len]`) may see some key, 0 where it
  sees none (its attention is then zero, as over zero keys)."""
  allowed = tf.reduce_max(tf.cast(bias, tf.float32), axis=-1, keepdims=True) > (
    large_negative(tf.float16) / 2  # above every dtype's masking value
  )
  return tf.cast(allowed, tf.float32)


def as_float32_logit_bias(bias: tf.Tensor) -> tf.Tensor:
  """A bias in float32 for adding to float32 logits. float16's masking value (-3e4) is raised to
  float32's (-1e9): -3e4 only shifts a fully masked row's logits, which would then keep the
  unmasked softmax, where float32 and bfloat16 masks give every key the same weight."""
  float32_bias = tf.cast(bias, tf.float32)
  if bias.dtype == tf.float16:
    float32_bias = tf.where(
      float32_bias <= large_negative(tf.float16), large_negative(tf.float32), float32_bias
    )
  return float32_bias
