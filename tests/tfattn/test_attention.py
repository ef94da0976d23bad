"""Merged-head attention (`SelfAttention`, `CrossAttention`): parity with
keras.layers.MultiHeadAttention, masking semantics, and the two decoding cache layouts."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfattn import masking
from tfattn.attention import CrossAttention, GrowingCache, PaddedCache, SelfAttention

D_MODEL, HEADS = 32, 4


def _keras_mha_copying(ours, query_len, key_len):
  """A built keras MHA whose weights are copied from our fused layer."""
  peer = keras.layers.MultiHeadAttention(num_heads=HEADS, key_dim=D_MODEL // HEADS)
  peer(tf.zeros([1, query_len, D_MODEL]), tf.zeros([1, key_len, D_MODEL]))
  if isinstance(ours, SelfAttention):
    kernels = tf.split(ours.query_key_value.kernel, 3, axis=1)
    biases = tf.split(ours.query_key_value.bias, 3)
  else:
    kernels = [ours.query.kernel, *tf.split(ours.key_value.kernel, 2, axis=1)]
    biases = [ours.query.bias, *tf.split(ours.key_value.bias, 2)]
  for dense, kernel, bias in zip(
    (peer._query_dense, peer._key_dense, peer._value_dense), kernels, biases
  ):
    dense.kernel.assign(tf.reshape(kernel, dense.kernel.shape))
    dense.bias.assign(tf.reshape(bias, dense.bias.shape))
  peer._output_dense.kernel.assign(tf.reshape(ours.output.kernel, peer._output_dense.kernel.shape))
  peer._output_dense.bias.assign(ours.output.bias)
  return peer


def _keras_mask(bias):
  """Our additive bias `[b|1, 1, q, k]` -> keras' boolean `[b, q, k]` (True = attend)."""
  return tf.equal(bias[:, 0], 0.0)


@pytest.mark.parametrize(
  "self_attention,query_len,key_len,causal",
  [(True, 7, 7, False), (True, 7, 7, True), (False, 5, 9, False), (False, 9, 4, False)],
)
def test_matches_keras_multi_head_attention(self_attention, query_len, key_len, causal):
  ours = (SelfAttention if self_attention else CrossAttention)(D_MODEL, HEADS, seed=3)
  peer = _keras_mha_copying(ours, query_len, key_len)
  query = tf.random.stateless_normal([2, query_len, D_MODEL], [1, 2])
  memory = query if self_attention else tf.random.stateless_normal([2, key_len, D_MODEL], [3, 4])
  # Second example has its last two keys padded.
  key_ids = tf.constant([[5] * key_len, [5] * (key_len - 2) + [0, 0]])
  bias = masking.combine(
    masking.padding_bias(key_ids), masking.causal_bias(query_len) if causal else None
  )
  bias = tf.broadcast_to(bias, [2, 1, query_len, key_len])

  if self_attention:
    ours_out, ours_weights = ours(query, bias=bias, return_scores=True)
  else:
    ours_out, ours_weights = ours(query, memory, bias=bias, return_scores=True)
  peer_out, peer_weights = peer(
    query, memory, attention_mask=_keras_mask(bias), return_attention_scores=True
  )
  np.testing.assert_allclose(ours_out, peer_out, atol=1e-5)
  np.testing.assert_allclose(ours_weights, peer_weights, atol=1e-5)


def test_masked_keys_get_exactly_zero_weight():
  attention = SelfAttention(D_MODEL, HEADS)
  x = tf.random.stateless_normal([2, 6, D_MODEL], [5, 6])
  ids = tf.constant([[4, 4, 4, 0, 0, 0], [4, 4, 4, 4, 4, 0]])
  _, weights = attention(x, bias=masking.padding_bias(ids), return_scores=True)
  padded = tf.cast(tf.equal(ids, 0), tf.float32)[:, tf.newaxis, tf.newaxis, :]
  assert float(tf.reduce_max(weights * padded)) == 0.0
  np.testing.assert_allclose(tf.reduce_sum(weights, -1), 1.0, atol=1e-6)


def test_lengths_bias_equals_padding_bias():
  ids = tf.constant([[4, 4, 0, 0], [4, 4, 4, 0]])
  np.testing.assert_array_equal(masking.lengths_bias([2, 3], 4), masking.padding_bias(ids))


def test_biases_combine_by_minimum_without_overflow():
  for dtype in (tf.float16, tf.bfloat16, tf.float32):
    combined = masking.combine(
      masking.padding_bias(tf.constant([[0, 4]]), dtype=dtype), masking.causal_bias(2, dtype=dtype)
    )
    assert combined.dtype == dtype
    assert bool(tf.reduce_all(tf.math.is_finite(tf.cast(combined, tf.float32))))
    assert float(tf.reduce_min(tf.cast(combined, tf.float32))) == pytest.approx(
      masking.large_negative(dtype), rel=1e-2
    )


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16, tf.float32])
def test_low_precision_with_fully_masked_rows_is_finite(dtype):
  attention = SelfAttention(D_MODEL, HEADS)
  x = tf.cast(tf.random.stateless_normal([2, 5, D_MODEL], [7, 8]) * 30.0, dtype)
  ids = tf.constant([[0, 0, 0, 0, 0], [4, 4, 0, 0, 0]])  # first row: every key masked
  bias = masking.combine(masking.padding_bias(ids, dtype=dtype), masking.causal_bias(5, dtype))
  out, weights = attention(x, bias=bias, return_scores=True)
  assert out.dtype == dtype
  assert bool(tf.reduce_all(tf.math.is_finite(tf.cast(out, tf.float32))))
  assert bool(tf.reduce_all(tf.math.is_finite(weights)))


def test_large_negative_rejects_integer_dtype():
  with pytest.raises(ValueError, match="floating"):
    masking.large_negative(tf.int32)


def test_mixed_dtype_biases_combine_in_float32_and_stay_finite():
  """A float16 padding bias combined with a float32 causal bias: casting the float32 -1e9 to
  float16 would give -inf, and a fully masked row NaN attention."""
  combined = masking.combine(
    masking.padding_bias(tf.constant([[0, 0]]), dtype=tf.float16),
    masking.causal_bias(2, dtype=tf.float32),
  )
  assert combined.dtype == tf.float32
  assert bool(tf.reduce_all(tf.math.is_finite(combined)))
  attention = SelfAttention(D_MODEL, HEADS)
  x = tf.random.stateless_normal([1, 2, D_MODEL], [3, 4])
  out, weights = attention(x, bias=combined, return_scores=True)
  assert bool(tf.reduce_all(tf.math.is_finite(out)))
  assert bool(tf.reduce_all(tf.math.is_finite(weights)))


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16, tf.float32])
def test_a_fully_masked_row_attends_to_nothing_as_over_zero_keys_in_every_dtype(dtype):
  """Zero weights and values, whatever the masked keys hold or how many there are: the answer
  over zero keys (a softmax averaged the masked keys: an empty row's answer then depended on its
  batch's padding)."""
  attention = SelfAttention(D_MODEL, HEADS)
  x = tf.cast(tf.random.stateless_normal([1, 4, D_MODEL], [5, 6]) * 3.0, dtype)
  bias = masking.padding_bias(tf.constant([[0, 0, 0, 0]]), dtype=dtype)  # every key masked
  out, weights = attention(x, bias=bias, return_scores=True)
  np.testing.assert_array_equal(weights, np.zeros(weights.shape))
  output_bias = attention.output(tf.zeros([1, 1, D_MODEL], dtype))  # the projection of zeros
  np.testing.assert_allclose(
    tf.cast(out, tf.float32), tf.cast(tf.broadcast_to(output_bias, out.shape), tf.float32), atol=0
  )
  longer = tf.concat([x, x * 2.0], axis=1)  # more masked keys, other values: the same answer
  bias8 = masking.padding_bias(tf.zeros([1, 8], tf.int32), dtype=dtype)
  np.testing.assert_array_equal(attention(longer, bias=bias8)[:, :4], out)


def test_cross_attention_over_a_projected_memory_equals_attention_over_the_memory():
  attention = CrossAttention(D_MODEL, HEADS, seed=4)
  query = tf.random.stateless_normal([2, 3, D_MODEL], [1, 1])
  memory = tf.random.stateless_normal([2, 5, D_MODEL], [2, 2])
  bias = masking.padding_bias(tf.constant([[4, 4, 4, 0, 0], [4, 4, 4, 4, 4]]))
  projected = attention.project_memory(memory)
  assert projected.key.shape == (2, HEADS, 5, D_MODEL // HEADS)
  np.testing.assert_allclose(
    attention.attend(query, projected, bias), attention(query, memory, bias), atol=1e-6
  )


@pytest.mark.parametrize("beams", [1, 3])
def test_beams_attending_to_their_example_once_equal_attention_to_a_memory_tiled_per_beam(beams):
  """A beam search step: rows `[batch * beams]` against the memory projected once per example
  give what every row gets against its own copy of the memory."""
  attention = CrossAttention(D_MODEL, HEADS, seed=4)
  memory = tf.random.stateless_normal([2, 5, D_MODEL], [2, 2])
  bias = masking.padding_bias(tf.constant([[4, 4, 4, 0, 0], [4, 4, 4, 4, 4]]))
  rows = tf.random.stateless_normal([2 * beams, 1, D_MODEL], [3, 3])
  once = attention.attend_beams(rows, attention.project_memory(memory), bias, beams)
  tiled = attention.attend(
    rows, attention.project_memory(tf.repeat(memory, beams, axis=0)), tf.repeat(bias, beams, 0)
  )
  assert once.shape == (2 * beams, 1, D_MODEL)
  np.testing.assert_allclose(once, tiled, atol=1e-6)


@pytest.mark.parametrize("layout", ["growing", "padded"])
def test_self_attention_steps_equal_causal_attention(layout):
  """Feeding positions one at a time through the cache gives what causal attention over the
  whole sequence gives, in both cache layouts."""
  attention = SelfAttention(D_MODEL, HEADS, seed=5)
  length, depth = 6, D_MODEL // HEADS
  x = tf.random.stateless_normal([2, length, D_MODEL], [3, 3])
  expected = attention(x, bias=masking.causal_bias(length))
  if layout == "growing":
    cache = GrowingCache.empty(2, HEADS, depth, tf.float32)
  else:
    cache = PaddedCache.empty(2, HEADS, depth, tf.float32, max_length=length + 2)
  outputs = []
  for step in range(length):
    output, cache = attention.step(x[:, step : step + 1], tf.constant(step), cache)
    outputs.append(output)
  assert isinstance(cache, GrowingCache if layout == "growing" else PaddedCache)
  assert cache.key.shape[2] == (length if layout == "growing" else length + 2)
  np.testing.assert_allclose(tf.concat(outputs, axis=1), expected, atol=1e-5)


@pytest.mark.parametrize("layout", ["growing", "padded"])
def test_self_attention_step_returns_a_new_cache_and_leaves_the_old_one_alone(layout):
  attention = SelfAttention(D_MODEL, HEADS, seed=6)
  depth = D_MODEL // HEADS
  if layout == "growing":
    cache = GrowingCache(
      *[tf.random.stateless_normal([1, HEADS, 2, depth], [i, 7]) for i in range(2)]
    )
  else:
    cache = PaddedCache(
      *[
        tf.random.stateless_normal([1, HEADS, 4, depth], [i, 7])
        * tf.constant([1.0, 1.0, 0.0, 0.0])[:, tf.newaxis]
        for i in range(2)
      ]
    )
  before = [t.numpy() for t in cache]
  _, new_cache = attention.step(
    tf.random.stateless_normal([1, 1, D_MODEL], [8, 8]), tf.constant(2), cache
  )
  for tensor, value in zip(cache, before):
    np.testing.assert_array_equal(tensor, value)
  # Positions 0 and 1 are kept and position 2 is the new one, in the new cache only.
  np.testing.assert_array_equal(new_cache.key[:, :, :2], before[0][:, :, :2])
  assert float(tf.reduce_max(tf.abs(new_cache.key[:, :, 2]))) > 0.0
