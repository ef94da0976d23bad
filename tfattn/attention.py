"""Merged-head scaled dot-product attention (paper section 3.2).

All heads are computed together: one fused projection, a reshape to `[batch, length, heads,
depth]`, a transpose to `[batch, heads, length, depth]`, one batched matmul for the scores and one
for the values. There is no loop over heads anywhere.
"""

import tensorflow as tf

from tfattn import layers, masking


def split_heads(x, num_heads, depth):
  """`[batch, length, heads * depth]` -> `[batch, heads, length, depth]`."""
  shape = tf.shape(x)
  x = tf.reshape(x, [shape[0], shape[1], num_heads, depth])
  return tf.transpose(x, [0, 2, 1, 3])


def merge_heads(x):
  """`[batch, heads, length, depth]` -> `[batch, length, heads * depth]`."""
  shape = tf.shape(x)
  x = tf.transpose(x, [0, 2, 1, 3])
  return tf.reshape(x, [shape[0], shape[2], shape[1] * shape[3]])


def scaled_dot_product_attention(query, key, value, bias=None, dropout_rate=0.0, rng=None,
                                 training=False):
  """softmax(Q K^T / sqrt(depth) + bias) V, with the softmax in float32.

  Args:
    query: `[batch, heads, q_len, depth]`.
    key, value: `[batch, heads, k_len, depth]`.
    bias: additive, broadcastable to `[batch, heads, q_len, k_len]` (see `tfattn.masking`).
  Returns:
    (`[batch, heads, q_len, depth]` values, float32 `[batch, heads, q_len, k_len]` weights).
  """
  depth = tf.shape(query)[-1]
  # Scaling the query before the matmul keeps float16 logits in range.
  query = query * tf.math.rsqrt(tf.cast(depth, query.dtype))
  logits = tf.cast(tf.matmul(query, key, transpose_b=True), tf.float32)
  if bias is not None:
    # Broadcasting explicitly: with static shapes, oneDNN fuses BatchMatMul + a broadcast Add of
    # a constant bias (the causal mask) into a kernel ~50x slower than matmul then add.
    logits += tf.broadcast_to(masking.as_float32_logit_bias(bias), tf.shape(logits))
  weights = tf.nn.softmax(logits, axis=-1)
  dropped = layers.dropout(tf.cast(weights, value.dtype), dropout_rate, rng, training)
  return tf.matmul(dropped, value), weights


class MultiHeadAttention(tf.Module):
  """Multi-head attention with fused projections.

  Self-attention projects q, k, v with one `[d_model, 3 * d_model]` kernel; cross-attention
  projects q with `[d_model, d_model]` and k, v from the memory with one `[d_model, 2 * d_model]`.
  """

  def __init__(self, d_model, num_heads, self_attention=True, dropout_rate=0.0, rng=None, seed=0,
               name=None):
    super().__init__(name=name)
    if d_model % num_heads:
      raise ValueError(f"d_model ({d_model}) must be divisible by num_heads ({num_heads})")
    self.d_model = d_model
    self.num_heads = num_heads
    self.depth = d_model // num_heads
    self.self_attention = self_attention
    self.dropout_rate = dropout_rate
    self._rng = rng
    with self.name_scope:
      if self_attention:
        self.query_key_value = layers.Linear(d_model, 3 * d_model, seed=seed,
                                             name="query_key_value")
      else:
        self.query = layers.Linear(d_model, d_model, seed=seed, name="query")
        self.key_value = layers.Linear(d_model, 2 * d_model, seed=seed, name="key_value")
      self.output = layers.Linear(d_model, d_model, seed=seed, name="output")

  def _split_fused(self, fused, parts):
    """`[batch, length, parts * d_model]` -> `parts` tensors `[batch, heads, length, depth]`."""
    shape = tf.shape(fused)
    fused = tf.reshape(fused, [shape[0], shape[1], parts, self.num_heads, self.depth])
    fused = tf.transpose(fused, [2, 0, 3, 1, 4])  # one transpose for q, k and v together
    return tf.unstack(fused, num=parts, axis=0)

  def project_memory(self, memory):
    """Cross-attention keys and values, computed once per source for decoding.

    memory: `[batch, k_len, d_model]` -> (key, value), each `[batch, heads, k_len, depth]`.
    """
    if self.self_attention:
      raise ValueError("project_memory is for cross-attention layers")
    key, value = self._split_fused(self.key_value(memory), 2)
    return key, value

  def __call__(self, query, memory=None, bias=None, training=False, cache=None,
               decode_index=None, memory_key_value=None, return_scores=False):
    """Attends from `query` to itself (self-attention) or to `memory` (cross-attention).

    Args:
      query: `[batch, q_len, d_model]`.
      memory: `[batch, k_len, d_model]`, cross-attention only.
      bias: additive mask broadcastable to `[batch, heads, q_len, k_len]`.
      cache: self-attention decoding state `{"key", "value"}: [batch, heads, T, depth]`; updated in
        place with this step's keys and values. Without `decode_index` the new keys are appended
        (T grows); with it, T is a fixed `max_length` and slot `decode_index` is written, which
        keeps every shape static for XLA.
      memory_key_value: precomputed `project_memory(memory)`, cross-attention only.
      return_scores: also return the float32 `[batch, heads, q_len, k_len]` attention weights.
    Returns:
      `[batch, q_len, d_model]` (and the weights when `return_scores`).
    """
    if self.self_attention:
      q, k, v = self._split_fused(self.query_key_value(query), 3)
      if cache is not None:
        k, v = self._update_cache(cache, k, v, decode_index)
    else:
      q = split_heads(self.query(query), self.num_heads, self.depth)
      if memory_key_value is None:
        if memory is None:
          raise ValueError("cross-attention needs `memory` or `memory_key_value`")
        memory_key_value = self.project_memory(memory)
      k, v = memory_key_value
    values, weights = scaled_dot_product_attention(q, k, v, bias, self.dropout_rate, self._rng,
                                                   training)
    output = self.output(merge_heads(values))
    return (output, weights) if return_scores else output

  @staticmethod
  def _update_cache(cache, key, value, decode_index):
    if decode_index is None:
      key = tf.concat([tf.cast(cache["key"], key.dtype), key], axis=2)
      value = tf.concat([tf.cast(cache["value"], value.dtype), value], axis=2)
    else:
      # Write this step into slot `decode_index` of the fixed-size cache.
      slot = tf.one_hot(decode_index, tf.shape(cache["key"])[2], dtype=key.dtype)
      slot = slot[tf.newaxis, tf.newaxis, :, tf.newaxis]
      key = tf.cast(cache["key"], key.dtype) * (1 - slot) + key * slot
      value = tf.cast(cache["value"], value.dtype) * (1 - slot) + value * slot
    cache["key"], cache["value"] = key, value
    return key, value
