"""Restricted self-attention in blocks (`tfattn.local_attention`, `SelfAttention(window=)`):
equal to an independent numpy reference and to full attention with a band bias (odd lengths,
padding, fully padded rows, r >= n, float16/bfloat16, gradients, graph and XLA), never building a
`[length, length]` tensor; and the `RingCache` that decodes it in O(r) memory."""

import numpy as np
import pytest
import tensorflow as tf

from tfattn import local_attention, masking
from tfattn.attention import RingCache, SelfAttention

D_MODEL, HEADS = 16, 2


def _numpy_band_attention(q, k, v, window, causal, key_padding):
  """The textbook loop: float64 softmax over the allowed keys of each query; rows with no
  allowed key are returned as NaN (their value is not defined by the band)."""
  batch, heads, length, depth = q.shape
  out = np.full(q.shape, np.nan)
  for b in range(batch):
    for h in range(heads):
      for i in range(length):
        keys = [
          j
          for j in range(length)
          if not key_padding[b, j] and (0 <= i - j <= window if causal else abs(i - j) <= window)
        ]
        if not keys:
          continue
        logits = np.array([q[b, h, i] @ k[b, h, j] / np.sqrt(depth) for j in keys])
        weights = np.exp(logits - logits.max())
        weights /= weights.sum()
        out[b, h, i] = weights @ v[b, h, keys]
  return out


def _inputs(length, seed, dtype=tf.float32, batch=3):
  """q, k, v `[batch, heads, length, 4]` and a key padding: row 1 half padded, row 2 all."""
  rng = np.random.default_rng(seed)
  q, k, v = (rng.normal(size=(batch, HEADS, length, 4)).astype(np.float32) for _ in range(3))
  padding = np.zeros([batch, length], bool)
  padding[1, length // 2 + 1 :] = True
  padding[2, :] = True
  return q, k, v, padding


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("length, window", [(1, 1), (7, 2), (13, 4), (16, 4), (5, 8), (9, 9)])
def test_blocks_equal_numpy_and_full_attention_with_a_band_bias(causal, length, window):
  q, k, v, padding = _inputs(length, seed=length * 10 + window)
  key_bias = tf.constant(np.where(padding, masking.large_negative(), 0.0)[:, None, None, :])
  values, weights = local_attention.local_attention(q, k, v, window, causal, key_bias)
  reference = _numpy_band_attention(q, k, v, window, causal, padding)
  defined = ~np.isnan(reference)
  np.testing.assert_allclose(values.numpy()[defined], reference[defined], atol=1e-5)
  # Fully masked rows (all of row 2; row 1's padding past the window) stay finite.
  assert np.isfinite(values.numpy()).all() and np.isfinite(weights.numpy()).all()
  bias = masking.combine(masking.band_bias(length, window, causal), key_bias)
  full_values, full_weights = (t.numpy() for t in _full_attention(q, k, v, bias))
  np.testing.assert_allclose(values.numpy()[defined], full_values[defined], atol=1e-5)
  dense = local_attention.blocks_to_dense(weights, length, causal).numpy()
  rows = defined[..., :1]  # [batch, heads, length, 1]
  np.testing.assert_allclose(np.where(rows, dense, 0), np.where(rows, full_weights, 0), atol=1e-6)


def _full_attention(q, k, v, bias):
  from tfattn.attention import scaled_dot_product_attention

  return scaled_dot_product_attention(tf.constant(q), tf.constant(k), tf.constant(v), bias)


def _layers(window, causal, dtype=tf.float32):
  """A windowed SelfAttention and a full one sharing its weights."""
  windowed = SelfAttention(D_MODEL, HEADS, seed=3, causal=causal, window=window)
  full = SelfAttention(D_MODEL, HEADS, seed=3, causal=causal)
  return windowed, full


def _x(length, seed=0, batch=2):
  return tf.random.stateless_normal([batch, length, D_MODEL], [seed, 2])


def _band_call(full, x, window, key_bias=None):
  """Full attention over the band: the layer's causal mask, the band bias and the key bias."""
  band = masking.band_bias(tf.shape(x)[1], window, full.causal)
  return full(x, bias=masking.combine(band, key_bias))


@pytest.mark.parametrize("causal", [False, True])
def test_the_layer_and_its_gradients_equal_full_attention_with_a_band_bias(causal):
  windowed, full = _layers(3, causal)
  x = _x(11)
  # Padding after position 8 of row 1, after position 1 of row 2: there queries 5.. see no key
  # in their window, and attend to nothing in both.
  key_bias = masking.lengths_bias(tf.constant([9, 2]), 11)
  with tf.GradientTape(persistent=True) as tape:
    tape.watch(x)
    ours = windowed(x, bias=key_bias)
    reference = _band_call(full, x, 3, key_bias)
    ours_loss, reference_loss = tf.reduce_sum(ours**2), tf.reduce_sum(reference**2)
  np.testing.assert_allclose(ours, reference, atol=1e-5)
  for a, b in zip(
    tape.gradient(ours_loss, [x, *windowed.trainable_variables]),
    tape.gradient(reference_loss, [x, *full.trainable_variables]),
  ):
    np.testing.assert_allclose(a, b, atol=1e-4)


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16])
def test_half_precision_matches_float32_and_keeps_masked_rows_finite(dtype):
  q, k, v, padding = _inputs(10, seed=5)
  key_bias = tf.constant(np.where(padding, masking.large_negative(dtype), 0.0)[:, None, None, :])
  half = [tf.cast(t, dtype) for t in (q, k, v)]
  values, _ = local_attention.local_attention(*half, 3, False, tf.cast(key_bias, dtype))
  assert values.dtype == dtype and np.isfinite(tf.cast(values, tf.float32).numpy()).all()
  reference = _numpy_band_attention(q, k, v, 3, False, padding)
  defined = ~np.isnan(reference)
  tolerance = 2e-2 if dtype == tf.float16 else 6e-2
  np.testing.assert_allclose(
    tf.cast(values, tf.float32).numpy()[defined], reference[defined], atol=tolerance
  )


@pytest.mark.slow  # XLA compiles a forward and backward pass
def test_graph_and_xla_run_every_length_through_one_trace_and_build_no_square_tensor():
  windowed, full = _layers(4, causal=True)
  spec = tf.TensorSpec([None, None, D_MODEL], tf.float32)

  def forward_backward(x):
    with tf.GradientTape() as tape:
      loss = tf.reduce_sum(windowed(x) ** 2)
    return loss, tape.gradient(loss, windowed.trainable_variables)

  graph = tf.function(forward_backward, input_signature=[spec], autograph=False)
  xla = tf.function(forward_backward, input_signature=[spec], autograph=False, jit_compile=True)
  for length in (5, 12, 33):
    x = _x(length, seed=length)
    reference = tf.reduce_sum(_band_call(full, x, 4) ** 2)
    for run in (graph, xla):
      loss, _ = run(x)
      np.testing.assert_allclose(loss, reference, rtol=1e-5)
  assert graph.experimental_get_tracing_count() == 1
  assert xla.experimental_get_tracing_count() == 1
  # Blocked, never banded: at a static length of 64, no op makes a [.., 64, 64] tensor.
  static = tf.function(forward_backward, autograph=False).get_concrete_function(
    tf.TensorSpec([1, 64, D_MODEL], tf.float32)
  )
  shapes = [o.shape for op in static.graph.get_operations() for o in op.outputs]
  assert not any(s.rank and s.rank >= 2 and s[-2:] == [64, 64] for s in shapes)
  assert any(s.rank == 5 and s[-2:] == [4, 8] for s in shapes)  # [.., blocks, block, 2 block]


def test_attention_maps_show_the_band():
  windowed, _ = _layers(2, causal=False)
  _, weights = windowed(_x(9), return_scores=True)  # [batch, heads, 9, 9]
  distance = np.abs(np.arange(9)[:, None] - np.arange(9)[None])
  assert (weights.numpy()[..., distance > 2] == 0).all()
  np.testing.assert_allclose(weights.numpy().sum(-1), 1.0, atol=1e-5)


def test_a_windowed_layer_refuses_a_square_bias():
  windowed, _ = _layers(2, causal=True)
  with pytest.raises(ValueError, match="key bias"):
    windowed(_x(5), bias=masking.causal_bias(5))
  with pytest.raises(ValueError, match="at least 1"):
    SelfAttention(D_MODEL, HEADS, window=0)


def test_ring_cache_holds_the_last_window_positions():
  np.testing.assert_array_equal(RingCache.slot_positions(1, 4), [0, 1, -2, -1])
  np.testing.assert_array_equal(RingCache.slot_positions(6, 4), [4, 5, 6, 3])
  keys = tf.reshape(tf.range(1, 7, dtype=tf.float32), [1, 1, 6, 1])  # positions 0..5 hold 1..6
  ring = RingCache.empty(1, 1, 1, tf.float32, 4).filled(keys, keys)
  np.testing.assert_array_equal(ring.key[0, 0, :, 0], [5, 6, 3, 4])  # positions 4, 5, 2, 3
  short = RingCache.empty(1, 1, 1, tf.float32, 4).filled(keys[:, :, :2], keys[:, :, :2])
  np.testing.assert_array_equal(short.key[0, 0, :, 0], [1, 2, 0, 0])
  empty = RingCache.empty(1, 1, 1, tf.float32, 4).filled(keys[:, :, :0], keys[:, :, :0])
  np.testing.assert_array_equal(empty.key[0, 0, :, 0], [0, 0, 0, 0])
  stepped = ring.add(tf.constant([[[[7.0]]]]), tf.constant([[[[7.0]]]]), 6)
  np.testing.assert_array_equal(stepped.key[0, 0, :, 0], [5, 6, 7, 4])  # slot 6 % 4 = 2


def test_cached_steps_through_the_ring_equal_the_whole_sequence():
  windowed, _ = _layers(3, causal=True)
  x = _x(10)
  whole = windowed(x)
  _, cache = windowed.prefill(
    x[:, :4], None, RingCache.empty(2, HEADS, D_MODEL // HEADS, tf.float32, 4)
  )
  for step in range(4, 10):
    out, cache = windowed.step(x[:, step : step + 1], step, cache)
    np.testing.assert_allclose(out[:, 0], whole[:, step], atol=1e-5)
