"""Merged-head scaled dot-product attention (paper section 3.2): `SelfAttention`, `CrossAttention`.

All heads are computed together: one fused projection, a reshape to `[batch, length, heads,
depth]`, a transpose to `[batch, heads, length, depth]`, one batched matmul for the scores and one
for the values. There is no loop over heads anywhere.

A `SelfAttention` built with a `window` r is the paper's restricted self-attention (section 4):
each position sees only the keys within r of it (|i - j| <= r, or 0 <= i - j <= r when causal),
computed in blocks (`tfattn.local_attention`), O(length * r) instead of O(length^2).

Decoding one token at a time, self-attention keeps the keys and values of the tokens before it in
a cache, in one of three layouts (all immutable: a step returns a new cache):
  * `GrowingCache`: one slot per token decoded so far, appended at each step; least work.
  * `PaddedCache`: `max_length` slots from the start, slot `step` written at step `step`; every
    shape is static, so the decoding loop compiles with `jit_compile=True`.
  * `RingCache`: a windowed attention's r + 1 slots, slot `step % (r + 1)` written at step
    `step`: memory O(r) however long the output; static shapes (XLA).
"""

from typing import NamedTuple, Optional, Tuple, Union

import tensorflow as tf

from tfattn import layers, local_attention, masking


def split_heads(x: tf.Tensor, num_heads: int, depth: int) -> tf.Tensor:
  """`[batch, length, heads * depth]` -> `[batch, heads, length, depth]`."""
  shape = tf.shape(x)
  x = tf.reshape(x, [shape[0], shape[1], num_heads, depth])
  return tf.transpose(x, [0, 2, 1, 3])


def merge_heads(x: tf.Tensor) -> tf.Tensor:
  """`[batch, heads, length, depth]` -> `[batch, length, heads * depth]`."""
  shape = tf.shape(x)
  x = tf.transpose(x, [0, 2, 1, 3])
  return tf.reshape(x, [shape[0], shape[2], shape[1] * shape[3]])


def scaled_dot_product_attention(
  query, key, value, bias=None, dropout_rate=0.0, rng=None, training=False
) -> Tuple[tf.Tensor, tf.Tensor]:
  """softmax(Q K^T / sqrt(depth) + bias) V, with the softmax in float32.

  A query whose every key the bias masks attends to nothing, as over zero keys: zero weights
  and zero values (a softmax would average the masked keys, an answer that depends on how much
  padding its batch has: an empty source's translation changed with its batch-mates).

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
  if bias is None:
    weights = tf.nn.softmax(logits, axis=-1)
    dropped = layers.dropout(tf.cast(weights, value.dtype), dropout_rate, rng, training)
    return tf.matmul(dropped, value), weights
  bias = masking.as_float32_logit_bias(bias)
  # Broadcasting explicitly: with static shapes, oneDNN fuses BatchMatMul + a broadcast Add of
  # a constant bias (the causal mask) into a kernel ~50x slower than matmul then add.
  logits += tf.broadcast_to(bias, tf.shape(logits))
  weights = tf.nn.softmax(logits, axis=-1)
  dropped = layers.dropout(tf.cast(weights, value.dtype), dropout_rate, rng, training)
  seen = masking.any_key_allowed(bias)  # float32 [batch or 1, heads or 1, q_len or 1, 1]
  return tf.matmul(dropped, value) * tf.cast(seen, value.dtype), weights * seen


class KeyValue(NamedTuple):
  """Projected keys and values, e.g. cross-attention's over the encoder output.

  Attributes:
    key: `[batch, heads, length, depth]`.
    value: `[batch, heads, length, depth]`.
  """

  key: tf.Tensor
  value: tf.Tensor


class GrowingCache(NamedTuple):
  """Self-attention keys and values of the tokens decoded so far; each step appends one.

  Attributes:
    key: `[batch, heads, steps_so_far, depth]`.
    value: `[batch, heads, steps_so_far, depth]`.
  """

  key: tf.Tensor
  value: tf.Tensor

  @classmethod
  def empty(cls, batch_size, num_heads: int, depth: int, dtype) -> "GrowingCache":
    nothing = tf.zeros([batch_size, num_heads, 0, depth], dtype)
    return cls(nothing, nothing)

  def add(self, key: tf.Tensor, value: tf.Tensor, step) -> "GrowingCache":
    """key, value: `[batch, heads, 1, depth]` of position `step` (the cache's length)."""
    del step  # the new slot is simply the next one
    return GrowingCache(
      tf.concat([tf.cast(self.key, key.dtype), key], axis=2),
      tf.concat([tf.cast(self.value, value.dtype), value], axis=2),
    )

  def unwritten_bias(self, step) -> None:
    """No slot is empty: the newest query may see every cached key."""
    del step

  def filled(self, key: tf.Tensor, value: tf.Tensor) -> "GrowingCache":
    """The cache holding key, value `[batch, heads, length, depth]` as positions 0..length-1
    (a prompt's, prefilled at once)."""
    return GrowingCache(key, value)


def _write_slot(cache, key: tf.Tensor, value: tf.Tensor, slot) -> Tuple[tf.Tensor, tf.Tensor]:
  """A fixed-slot cache's key and value `[batch, heads, slots, depth]` with slot `slot` set to
  key, value `[batch, heads, 1, depth]` (both fixed layouts write this way)."""
  # A one-hot select rather than a scatter keeps every shape static.
  one_hot = tf.one_hot(slot, tf.shape(cache.key)[2], dtype=key.dtype)
  one_hot = one_hot[tf.newaxis, tf.newaxis, :, tf.newaxis]  # [1, 1, slots, 1]
  return (
    tf.cast(cache.key, key.dtype) * (1 - one_hot) + key * one_hot,
    tf.cast(cache.value, value.dtype) * (1 - one_hot) + value * one_hot,
  )


class PaddedCache(NamedTuple):
  """Self-attention keys and values in `max_length` fixed slots; slot `step` is written at step
  `step` and later slots hold zeros. Every shape is static (XLA).

  Attributes:
    key: `[batch, heads, max_length, depth]`.
    value: `[batch, heads, max_length, depth]`.
  """

  key: tf.Tensor
  value: tf.Tensor

  @classmethod
  def empty(cls, batch_size, num_heads: int, depth: int, dtype, max_length) -> "PaddedCache":
    zeros = tf.zeros([batch_size, num_heads, max_length, depth], dtype)
    return cls(zeros, zeros)

  def add(self, key: tf.Tensor, value: tf.Tensor, step) -> "PaddedCache":
    """key, value: `[batch, heads, 1, depth]` of position `step`, written into slot `step`."""
    return PaddedCache(*_write_slot(self, key, value, step))

  def unwritten_bias(self, step) -> tf.Tensor:
    """`[1, 1, 1, max_length]`: the query at `step` may see slots `0..step` only."""
    return masking.step_bias(step, tf.shape(self.key)[2])

  def filled(self, key: tf.Tensor, value: tf.Tensor) -> "PaddedCache":
    """This cache's slots with key, value `[batch, heads, length, depth]` in slots
    0..length-1 and zeros after them (a prompt's, prefilled at once)."""
    after = [[0, 0], [0, 0], [0, tf.shape(self.key)[2] - tf.shape(key)[2]], [0, 0]]
    return PaddedCache(tf.pad(key, after), tf.pad(value, after))


class RingCache(NamedTuple):
  """A windowed self-attention's keys and values in `slots` = window + 1 fixed slots: position
  p lives in slot `p % slots`, overwriting position `p - slots`, which the window no longer sees.
  Every shape is static (XLA); the key order in the slots does not matter to attention.

  Attributes:
    key: `[batch, heads, slots, depth]`.
    value: `[batch, heads, slots, depth]`.
  """

  key: tf.Tensor
  value: tf.Tensor

  @classmethod
  def empty(cls, batch_size, num_heads: int, depth: int, dtype, slots: int) -> "RingCache":
    zeros = tf.zeros([batch_size, num_heads, slots, depth], dtype)
    return cls(zeros, zeros)

  @staticmethod
  def slot_positions(step, slots) -> tf.Tensor:
    """int32 `[slots]`: the position each slot holds once position `step` is written (the
    latest p <= step with p % slots == slot; negative: never written)."""
    return step - tf.math.floormod(step - tf.range(slots), slots)

  def add(self, key: tf.Tensor, value: tf.Tensor, step) -> "RingCache":
    """key, value: `[batch, heads, 1, depth]` of position `step`, written into its slot."""
    return RingCache(*_write_slot(self, key, value, step % tf.shape(self.key)[2]))

  def unwritten_bias(self, step) -> tf.Tensor:
    """`[1, 1, 1, slots]`: until the ring has turned once, slots after `step` are empty."""
    return masking.step_bias(step, tf.shape(self.key)[2])

  def filled(self, key: tf.Tensor, value: tf.Tensor) -> "RingCache":
    """The ring after writing key, value `[batch, heads, length, depth]` as positions
    0..length-1 (a prompt's, prefilled at once): its last `slots` positions."""
    length = tf.shape(key)[2]
    positions = self.slot_positions(length - 1, tf.shape(self.key)[2])  # [slots]
    # An unwritten slot reads one zero position appended after the prompt (even an empty one).
    index = tf.where(positions >= 0, positions, length)
    after = [[0, 0], [0, 0], [0, 1], [0, 0]]
    return RingCache(
      tf.gather(tf.pad(key, after), index, axis=2), tf.gather(tf.pad(value, after), index, axis=2)
    )


# A self-attention layer's decoding cache, in any layout.
SelfAttentionCache = Union[GrowingCache, PaddedCache, RingCache]


def empty_cache(
  batch_size, num_heads: int, depth: int, dtype, *, window=None, slots=None
) -> SelfAttentionCache:
  """The layout decoding uses, empty (every model that decodes chooses it here):

  * with an attention `window` r: a `RingCache` of r + 1 slots, whatever the length;
  * else with `slots` (a padded decode's positions): a `PaddedCache` of that many;
  * else a `GrowingCache` (graph mode).
  """
  if window is not None:
    return RingCache.empty(batch_size, num_heads, depth, dtype, window + 1)
  if slots is not None:
    return PaddedCache.empty(batch_size, num_heads, depth, dtype, slots)
  return GrowingCache.empty(batch_size, num_heads, depth, dtype)


def cache_loop_shapes(layer_caches):
  """The shape invariants of a tuple of self-attention caches (one a layer) in a decoding
  `tf.while_loop`, or None when every layer keeps its shapes (padded, ring). A `GrowingCache`
  lengthens: every axis but depth relaxed (the cache is opaque to the search, as in Model
  Garden's beam search; no slower than relaxing the length alone, WORKSPACE_NOTES issue 12)."""
  if not any(isinstance(c, GrowingCache) for c in layer_caches):
    return None
  return tf.nest.map_structure(
    lambda t: tf.TensorShape([None] * (t.shape.rank - 1) + [t.shape[-1]]), layer_caches
  )


class _MergedHeadAttention(tf.Module):
  """What both attentions share: head bookkeeping, the output projection and the attention."""

  def __init__(self, d_model: int, num_heads: int, dropout_rate: float, rng, name):
    super().__init__(name=name)
    if d_model % num_heads:
      raise ValueError(f"d_model ({d_model}) must be divisible by num_heads ({num_heads})")
    self.d_model = d_model
    self.num_heads = num_heads
    self.depth = d_model // num_heads
    self.dropout_rate = dropout_rate
    self._rng = rng

  def _split_fused(self, fused, parts):
    """`[batch, length, parts * d_model]` -> `parts` tensors `[batch, heads, length, depth]`."""
    shape = tf.shape(fused)
    fused = tf.reshape(fused, [shape[0], shape[1], parts, self.num_heads, self.depth])
    fused = tf.transpose(fused, [2, 0, 3, 1, 4])  # one transpose for q, k and v together
    return tf.unstack(fused, num=parts, axis=0)

  def _attend(self, q, k, v, bias, training, return_scores):
    """q `[batch, heads, q_len, depth]`, k, v `[batch, heads, k_len, depth]` ->
    `[batch, q_len, d_model]` (and the float32 `[batch, heads, q_len, k_len]` weights)."""
    values, weights = scaled_dot_product_attention(
      q, k, v, bias, self.dropout_rate, self._rng, training
    )
    output = self.output(merge_heads(values))  # [batch, q_len, d_model]
    return (output, weights) if return_scores else output


class SelfAttention(_MergedHeadAttention):
  """Multi-head self-attention with one fused `[d_model, 3 * d_model]` query/key/value kernel."""

  def __init__(
    self,
    d_model: int,
    num_heads: int,
    dropout_rate: float = 0.0,
    rng=None,
    seed: int = 0,
    name: Optional[str] = None,
    causal: bool = False,
    window: Optional[int] = None,
  ):
    """Creates the projections.

    Args:
      d_model: width of the inputs and outputs; a multiple of `num_heads`.
      num_heads: number of attention heads, each `d_model // num_heads` wide.
      dropout_rate: dropout on the attention weights while training.
      rng: the `tf.random.Generator` that draws the dropout masks (None: no dropout).
      seed: base seed of the stateless weight initialisers.
      name: module name, the prefix of the variable names (e.g. "self_attention").
      causal: a position never sees later ones (the decoder's, the language model's).
      window: None for full attention; r >= 1 for restricted self-attention: position i sees
        keys j with |i - j| <= r (0 <= i - j <= r when causal), computed in blocks.
    """
    super().__init__(d_model, num_heads, dropout_rate, rng, name)
    if window is not None and window < 1:
      raise ValueError(f"window must be at least 1, got {window}")
    self.causal = causal
    self.window = window
    with self.name_scope:
      self.query_key_value = layers.Linear(d_model, 3 * d_model, seed=seed, name="query_key_value")
      self.output = layers.Linear(d_model, d_model, seed=seed, name="output")

  def __call__(self, x: tf.Tensor, bias=None, training: bool = False, return_scores: bool = False):
    """Every position of `x` attends to the positions of `x` that the layer's causality and
    window and `bias` allow.

    Args:
      x: `[batch, length, d_model]`.
      bias: additive mask broadcastable to `[batch, heads, length, length]`; with a window, a
        key mask broadcastable to `[batch, 1, 1, length]` (padding).
      training: apply dropout to the attention weights.
      return_scores: also return the float32 `[batch, heads, length, length]` weights (with a
        window: zero outside the band, spread from the blocks, O(length^2): for maps only).
    Returns:
      `[batch, length, d_model]` (and the weights when `return_scores`).
    """
    q, k, v = self._split_fused(self.query_key_value(x), 3)  # each [batch, heads, length, depth]
    return self._self_attend(q, k, v, bias, training, return_scores)

  def _self_attend(self, q, k, v, bias, training, return_scores):
    """q, k, v `[batch, heads, length, depth]` -> `[batch, length, d_model]` (and the weights),
    full or windowed, with the causal mask when the layer is causal."""
    if self.window is None:
      if self.causal:
        bias = masking.combine(masking.causal_bias(tf.shape(q)[2]), bias)
      return self._attend(q, k, v, bias, training, return_scores)
    if bias is not None and bias.shape.rank == 4 and bias.shape[2] not in (1, None):
      raise ValueError(
        f"A windowed self-attention takes a key bias [batch, 1, 1, length], got {bias.shape}"
      )
    values, weights = local_attention.local_attention(
      q, k, v, self.window, self.causal, bias, self.dropout_rate, self._rng, training
    )
    output = self.output(merge_heads(values))  # [batch, length, d_model]
    if not return_scores:
      return output
    return output, local_attention.blocks_to_dense(weights, tf.shape(q)[2], self.causal)

  def step(
    self, x: tf.Tensor, step, cache: SelfAttentionCache, bias=None
  ) -> Tuple[tf.Tensor, SelfAttentionCache]:
    """One decoding step: the newest position attends to itself and the earlier ones its cache
    holds (a windowed layer's `RingCache` holds exactly its window).

    Args:
      x: `[batch, 1, d_model]`, the input at position `step`.
      step: int32 scalar, the position of `x`.
      cache: a `GrowingCache`, `PaddedCache` or `RingCache` holding positions `0..step - 1`
        (a ring: the last `window` of them); not modified.
      bias: None, or keys masked besides the unwritten ones, `[batch, 1, 1, slots]` (e.g. a
        left-padded prompt's padding).
    Returns:
      (`[batch, 1, d_model]`, the cache with position `step` added, of the same layout).
    """
    q, k, v = self._split_fused(self.query_key_value(x), 3)  # each [batch, heads, 1, depth]
    cache = cache.add(k, v, step)  # key, value: [batch, heads, slots, depth]
    bias = masking.combine(cache.unwritten_bias(step), bias)
    output = self._attend(q, cache.key, cache.value, bias, False, False)
    return output, cache

  def prefill(
    self, x: tf.Tensor, bias, cache: SelfAttentionCache
  ) -> Tuple[tf.Tensor, SelfAttentionCache]:
    """Every position of `x` at once (no dropout), keeping their keys and values: a prompt
    before its decoding steps.

    Args:
      x: `[batch, length, d_model]`, positions 0..length-1.
      bias: additive mask broadcastable to `[batch, heads, length, length]` besides the layer's
        causality and window (with a window: a key mask `[batch, 1, 1, length]`).
      cache: an empty cache of the layout to fill.
    Returns:
      (`[batch, length, d_model]`, the cache holding positions 0..length-1).
    """
    q, k, v = self._split_fused(self.query_key_value(x), 3)  # each [batch, heads, length, depth]
    return self._self_attend(q, k, v, bias, False, False), cache.filled(k, v)


class CrossAttention(_MergedHeadAttention):
  """Multi-head attention from queries to a memory (the encoder output): a `[d_model, d_model]`
  query kernel and one fused `[d_model, 2 * d_model]` key/value kernel over the memory."""

  def __init__(
    self,
    d_model: int,
    num_heads: int,
    dropout_rate: float = 0.0,
    rng=None,
    seed: int = 0,
    name: Optional[str] = None,
  ):
    """Creates the projections.

    Args:
      d_model: width of the queries, the memory and the outputs; a multiple of `num_heads`.
      num_heads: number of attention heads, each `d_model // num_heads` wide.
      dropout_rate: dropout on the attention weights while training.
      rng: the `tf.random.Generator` that draws the dropout masks (None: no dropout).
      seed: base seed of the stateless weight initialisers.
      name: module name, the prefix of the variable names (e.g. "cross_attention").
    """
    super().__init__(d_model, num_heads, dropout_rate, rng, name)
    with self.name_scope:
      self.query = layers.Linear(d_model, d_model, seed=seed, name="query")
      self.key_value = layers.Linear(d_model, 2 * d_model, seed=seed, name="key_value")
      self.output = layers.Linear(d_model, d_model, seed=seed, name="output")

  def project_memory(self, memory: tf.Tensor) -> KeyValue:
    """Keys and values of the memory, computed once per source when decoding.

    memory: `[batch, k_len, d_model]` -> key, value each `[batch, heads, k_len, depth]`.
    """
    key, value = self._split_fused(self.key_value(memory), 2)
    return KeyValue(key, value)

  def __call__(
    self,
    x: tf.Tensor,
    memory: tf.Tensor,
    bias=None,
    training: bool = False,
    return_scores: bool = False,
  ):
    """Every position of `x` attends to the positions of `memory` that `bias` allows.

    Args:
      x: `[batch, q_len, d_model]`.
      memory: `[batch, k_len, d_model]`.
      bias: additive mask broadcastable to `[batch, heads, q_len, k_len]`.
      training: apply dropout to the attention weights.
      return_scores: also return the float32 `[batch, heads, q_len, k_len]` weights.
    Returns:
      `[batch, q_len, d_model]` (and the weights when `return_scores`).
    """
    return self.attend(x, self.project_memory(memory), bias, training, return_scores)

  def attend(
    self,
    x: tf.Tensor,
    memory_key_value: KeyValue,
    bias=None,
    training: bool = False,
    return_scores: bool = False,
  ):
    """Like `__call__`, with the memory already projected by `project_memory` (decoding)."""
    q = split_heads(self.query(x), self.num_heads, self.depth)  # [batch, heads, q_len, depth]
    return self._attend(
      q, memory_key_value.key, memory_key_value.value, bias, training, return_scores
    )

  def attend_beams(self, x: tf.Tensor, memory_key_value: KeyValue, bias, beams: int):
    """One step of a search over `beams` hypotheses an example, against the memory projected
    once per source (not once per beam): an example's beams are its queries.

    Args:
      x: `[batch * beams, 1, d_model]`, each example's beams adjacent.
      memory_key_value: `project_memory` of the untiled memory: `[batch, heads, k_len, depth]`.
      bias: additive mask broadcastable to `[batch, heads, beams, k_len]`.
      beams: hypotheses an example (a Python int).
    Returns:
      `[batch * beams, 1, d_model]`: what `attend` gives with the memory tiled to every beam.
    """
    if beams == 1:
      return self.attend(x, memory_key_value, bias)
    q = tf.reshape(self.query(x), [-1, beams, self.num_heads, self.depth])  # [b, beams, h, d]
    q = tf.transpose(q, [0, 2, 1, 3])  # [batch, heads, beams, depth]
    values, _ = scaled_dot_product_attention(
      q, memory_key_value.key, memory_key_value.value, bias
    )  # [batch, heads, beams, depth]
    values = tf.transpose(values, [0, 2, 1, 3])  # [batch, beams, heads, depth]
    return self.output(tf.reshape(values, [-1, 1, self.d_model]))  # [batch * beams, 1, d_model]
