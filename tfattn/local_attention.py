"""Restricted self-attention (paper section 4): each query attends only to keys within `window`
positions of it, computed in blocks so that no `[length, length]` tensor exists.

The sequence is padded to a multiple of the block (`window` positions) and cut into blocks.
Block b's queries need keys from `b * block - window` to `(b + 1) * block - 1 + window`: its own
block and its neighbours (the one before it, and the one after it unless causal). Stacking those
neighbours gives keys `[batch, heads, blocks, neighbours * block, depth]`, and the scores are
`[batch, heads, blocks, block, neighbours * block]`: O(length * window) time and memory. Within
the neighbours, a static band bias keeps exactly |i - j| <= window (encoder) or
0 <= i - j <= window (causal); key padding (and the block padding) is masked as in full attention.
Heads stay merged and the neighbours are three (two) static slices: there is no loop over heads or
blocks. The padding to whole blocks happens inside the layer with dynamic sizes, so every length
runs through one traced graph, and under XLA every shape is known once the length is.

The idea is tensor2tensor's `local_attention_1d` / `masked_local_attention_1d`; this is written
for tfattn's additive float32 biases.
"""

from typing import Optional, Tuple

import numpy as np
import tensorflow as tf

from tfattn import layers, masking


def block_size(window: int, static_length: Optional[int]) -> int:
  """Positions per block: `window`, or the whole (static) length when that is shorter (one block
  then holds every key; correctness needs block >= window or a single block)."""
  if static_length is not None and static_length < window:
    return max(static_length, 1)
  return window


def _neighbours(causal: bool) -> int:
  """Blocks each query block reads: the one before and itself (causal), and the one after."""
  return 2 if causal else 3


def _band_bias(block: int, window: int, causal: bool) -> tf.Tensor:
  """float32 `[block, neighbours * block]`: 0 where query `i` of a block may see key `j` of its
  neighbours, else float32's masking value. Key j sits at position `j - block` relative to the
  block's first query, so the distance is `i - j + block` whatever the block."""
  queries = np.arange(block)[:, np.newaxis]
  keys = np.arange(_neighbours(causal) * block)[np.newaxis, :]
  distance = queries - keys + block  # query position - key position
  allowed = (distance >= 0) if causal else (distance >= -window)
  allowed &= distance <= window
  return tf.constant(np.where(allowed, 0.0, masking.large_negative()).astype(np.float32))


def _key_blocks(x: tf.Tensor, block: int, blocks, causal: bool, pad_value=0.0) -> tf.Tensor:
  """`[..., length, depth]` -> `[..., blocks, neighbours * block, depth]`: for each query block,
  the keys of the block before it, its own (and the one after it), padded with `pad_value`."""
  length = tf.shape(x)[-2]
  after = blocks * block - length + (0 if causal else block)
  rank = x.shape.rank
  paddings = [[0, 0]] * (rank - 2) + [[block, after], [0, 0]]
  padded = tf.pad(x, paddings, constant_values=pad_value)
  lead = tf.shape(x)[:-2]
  padded = tf.reshape(
    padded, tf.concat([lead, [blocks + _neighbours(causal) - 1, block, tf.shape(x)[-1]]], 0)
  )
  slices = [padded[..., i : i + blocks, :, :] for i in range(_neighbours(causal))]
  return tf.concat(slices, axis=-2)


def local_attention(
  query: tf.Tensor,
  key: tf.Tensor,
  value: tf.Tensor,
  window: int,
  causal: bool = False,
  key_bias: Optional[tf.Tensor] = None,
  dropout_rate: float = 0.0,
  rng=None,
  training: bool = False,
) -> Tuple[tf.Tensor, tf.Tensor]:
  """softmax(Q K^T / sqrt(depth) + bias) V over the band, blocked; the softmax in float32.

  Args:
    query, key, value: `[batch, heads, length, depth]` (self-attention: one length).
    window: r >= 1; query i sees keys j with |i - j| <= r, or 0 <= i - j <= r when `causal`.
    causal: the decoder's and the language model's band.
    key_bias: None or an additive key mask broadcastable to `[batch, 1, 1, length]` (padding).
  A query with no allowed key (padding beyond its window) attends to nothing: zero values and
  weights, as full attention gives it (`attention.scaled_dot_product_attention`).

  Returns:
    (`[batch, heads, length, depth]` values, float32 `[batch, heads, blocks, block, neighbours
    * block]` weights; `blocks_to_dense` spreads them to `[batch, heads, length, length]`).
  """
  query, key, value = (tf.convert_to_tensor(t) for t in (query, key, value))
  shape = tf.shape(query)
  length, depth = shape[2], query.shape[-1]
  block = block_size(window, query.shape[2])
  blocks = (length + block - 1) // block
  queries = tf.pad(query, [[0, 0], [0, 0], [0, blocks * block - length], [0, 0]])
  queries = tf.reshape(queries, [shape[0], shape[1], blocks, block, depth])
  # Scaling the query before the matmul keeps float16 logits in range.
  queries *= tf.math.rsqrt(tf.cast(depth, query.dtype))
  keys = _key_blocks(key, block, blocks, causal)  # [batch, heads, blocks, n * block, depth]
  values = _key_blocks(value, block, blocks, causal)
  logits = tf.cast(tf.matmul(queries, keys, transpose_b=True), tf.float32)
  # Key padding, and the positions outside 0..length-1 the blocks add, in float32.
  if key_bias is None:
    key_bias = tf.zeros([1, 1, 1, length], tf.float32)
  key_bias = masking.as_float32_logit_bias(key_bias)[:, :, 0, :, tf.newaxis]  # [b', 1, len, 1]
  key_bias = _key_blocks(key_bias, block, blocks, causal, masking.large_negative())
  key_bias = tf.transpose(key_bias, [0, 1, 2, 4, 3])  # [b', 1, blocks, 1, n * block]
  bias = tf.minimum(_band_bias(block, window, causal), key_bias)
  # Broadcast explicitly: see scaled_dot_product_attention (oneDNN's slow fused broadcast add).
  logits += tf.broadcast_to(bias, tf.shape(logits))
  weights = tf.nn.softmax(logits, axis=-1)
  dropped = layers.dropout(tf.cast(weights, value.dtype), dropout_rate, rng, training)
  seen = masking.any_key_allowed(bias)  # [b', 1, blocks, block, 1]: 0 for a query with no key
  attended = tf.matmul(dropped, values) * tf.cast(seen, value.dtype)  # [b, heads, blocks, block, d]
  attended = tf.reshape(attended, [shape[0], shape[1], blocks * block, depth])
  return attended[:, :, :length], weights * seen


def blocks_to_dense(weights: tf.Tensor, length, causal: bool) -> tf.Tensor:
  """`local_attention`'s weights `[batch, heads, blocks, block, neighbours * block]` ->
  `[batch, heads, length, length]`, zeros outside the band: for attention maps, not training
  (it is O(length^2)).

  Row b of blocks holds keys from position `(b - 1) * block`; laid out in rows one block longer
  than the padded key axis, each row lands shifted right by one block more than the row before
  (the skewing trick of relative attention)."""
  shape = tf.shape(weights)
  blocks, block = shape[2], shape[3]
  span = (blocks + _neighbours(causal) - 1) * block  # key positions the blocks cover
  rows = tf.transpose(weights, [0, 1, 3, 2, 4])  # [batch, heads, block, blocks, n * block]
  rows = tf.pad(rows, [[0, 0], [0, 0], [0, 0], [0, 0], [0, span + block - shape[4]]])
  flat = tf.reshape(rows, [shape[0], shape[1], block, blocks * (span + block)])
  skewed = tf.reshape(flat[..., : blocks * span], [shape[0], shape[1], block, blocks, span])
  dense = tf.transpose(skewed, [0, 1, 3, 2, 4])  # [batch, heads, blocks, block, span]
  dense = tf.reshape(dense, [shape[0], shape[1], blocks * block, span])
  return dense[:, :, :length, block : block + length]
