"""The Transformer (Vaswani et al., 2017) and an encoder-only classifier, as `tf.Module`s.

Attention maps come from the same forward pass as the logits:
  logits, weights = model(source_ids, target_ids, return_attention=True)  # AttentionWeights
  logits, weights = classifier(ids, return_attention=True)  # weights.encoder only

Decoding: `model.start_decoding(source_ids, options)` is what `tfattn.decoding`'s searches run
(it encodes the source and projects it once); below it, one token at a time:
  memory = model.decoding_memory(*model.encode(source_ids))  # once per source
  cache = model.init_cache(batch_size, max_length=None)       # GrowingCache, PaddedCache, RingCache
  logits, cache = model.decode_step(last_tokens, step, cache, memory)  # a new cache each step
"""

from typing import NamedTuple, Optional, Tuple

import tensorflow as tf

from tfattn import decoding, masking, position
from tfattn.attention import (
  CrossAttention,
  KeyValue,
  SelfAttention,
  SelfAttentionCache,
  cache_loop_shapes,
  empty_cache,
)
from tfattn.config import TransformerConfig
from tfattn.decode_options import DecodeOptions
from tfattn.layers import Embedding, FeedForward, LayerNorm, Linear, dropout
from tfattn.position import LearnedPosition, SinusoidalPosition

# The decoder's cache: one self-attention cache per decoder layer, all of one layout.
DecoderCache = Tuple[SelfAttentionCache, ...]


class AttentionWeights(NamedTuple):
  """Every attention's weights from one forward pass: one float32 tensor a layer, first layer
  first, each the softmax before attention dropout (rows sum to 1 over the keys a mask allows,
  masked keys get 0).

  Attributes:
    encoder: encoder self-attention, each `[batch, heads, s_len, s_len]`.
    decoder: decoder (causal) self-attention, each `[batch, heads, t_len, t_len]`; () for a
      classifier.
    cross: decoder-to-encoder attention, each `[batch, heads, t_len, s_len]` (row i: the query
      that predicts target token i); () for a classifier.
  """

  encoder: Tuple[tf.Tensor, ...] = ()
  decoder: Tuple[tf.Tensor, ...] = ()
  cross: Tuple[tf.Tensor, ...] = ()


class DecodingMemory(NamedTuple):
  """What every decoding step reads and none changes: the source, projected once per source.

  Attributes:
    key_values: one `KeyValue` per decoder layer, cross-attention keys and values, each
      `[batch, heads, s_len, depth]`.
    bias: `[batch, 1, 1, s_len]` source padding bias.
    beams: decoding rows an example (a beam search's beam size; a Python int): the steps' rows
      are `[batch * beams]`, each example's adjacent, and share their example's memory.
  """

  key_values: Tuple[KeyValue, ...]
  bias: tf.Tensor
  beams: int = 1


class _ResidualLayer(tf.Module):
  """What encoder and decoder layers share: self-attention and feed-forward sublayers, each in
  residual wiring, post-norm LN(x + Sublayer(x)) or pre-norm x + Sublayer(LN(x)). The
  self-attention is causal in a layer class that says so, and windowed when the config has an
  `attention_window`."""

  causal = False

  def __init__(self, config: TransformerConfig, rng=None, name: Optional[str] = None):
    """Creates the sublayers.

    Args:
      config: model sizes, dropout rates and norm position.
      rng: the model's `tf.random.Generator` for dropout masks (None: no dropout).
      name: module name, e.g. "layer_0".
    """
    super().__init__(name=name)
    c = config
    self.pre_norm = c.norm_position == "pre"
    self.dropout_rate = c.dropout_rate
    self._rng = rng
    with self.name_scope:
      self.self_attention = SelfAttention(
        c.d_model,
        c.num_heads,
        c.attention_dropout_rate,
        rng,
        c.seed,
        name="self_attention",
        causal=self.causal,
        window=c.attention_window,
      )
      self.self_attention_norm = LayerNorm(
        c.d_model, c.layer_norm_epsilon, name="self_attention_norm"
      )
      self.feed_forward = FeedForward(
        c.d_model,
        c.dff,
        c.feed_forward_dropout_rate,
        rng,
        c.seed,
        name="feed_forward",
        activation=c.activation,
      )
      self.feed_forward_norm = LayerNorm(c.d_model, c.layer_norm_epsilon, name="feed_forward_norm")

  def _sublayer_input(self, x, norm):
    """What a sublayer reads: LN(x) with pre-norm, x itself with post-norm."""
    return norm(x) if self.pre_norm else x

  def _add_residual(self, x, sublayer_output, norm, training):
    """x + dropout(output), then LN with post-norm."""
    x = x + dropout(sublayer_output, self.dropout_rate, self._rng, training)
    return x if self.pre_norm else norm(x)

  def _residual(self, x, norm, sublayer, training):
    return self._add_residual(x, sublayer(self._sublayer_input(x, norm)), norm, training)

  def _attention_residual(self, x, norm, attention, training):
    """`_residual` around an attention called with `return_scores=True`: -> (new x, its
    float32 weights). The weights are the softmax the attention computes anyway, so returning
    them adds no op."""
    attended, weights = attention(self._sublayer_input(x, norm))
    return self._add_residual(x, attended, norm, training), weights

  def _feed_forward_block(self, x, training):
    return self._residual(
      x, self.feed_forward_norm, lambda h: self.feed_forward(h, training=training), training
    )


class EncoderLayer(_ResidualLayer):
  """Self-attention then feed-forward, each wrapped in a residual + layer norm."""

  def __call__(self, x, bias=None, training=False, return_attention=False):
    """x: `[batch, length, d_model]`, bias: `[batch, 1, 1, length]` -> `[batch, length,
    d_model]` (and, with `return_attention`, the float32 self-attention weights `[batch, heads,
    length, length]`)."""
    x, weights = self._attention_residual(
      x,
      self.self_attention_norm,
      lambda h: self.self_attention(h, bias=bias, training=training, return_scores=True),
      training,
    )
    x = self._feed_forward_block(x, training)
    return (x, weights) if return_attention else x


class DecoderLayer(_ResidualLayer):
  """Masked self-attention, cross-attention over the encoder output, then feed-forward."""

  causal = True

  def __init__(self, config: TransformerConfig, rng=None, name: Optional[str] = None):
    """Creates the sublayers.

    Args:
      config: model sizes, dropout rates and norm position.
      rng: the model's `tf.random.Generator` for dropout masks (None: no dropout).
      name: module name, e.g. "layer_0".
    """
    super().__init__(config, rng, name=name)
    c = config
    with self.name_scope:
      self.cross_attention = CrossAttention(
        c.d_model, c.num_heads, c.attention_dropout_rate, rng, c.seed, name="cross_attention"
      )
      self.cross_attention_norm = LayerNorm(
        c.d_model, c.layer_norm_epsilon, name="cross_attention_norm"
      )

  def __call__(
    self, x, memory, self_bias=None, memory_bias=None, training=False, return_attention=False
  ):
    """Teacher-forced: x `[batch, t_len, d_model]`, memory `[batch, s_len, d_model]` -> like x
    (and, with `return_attention`, the float32 weights of the self-attention `[batch, heads,
    t_len, t_len]` and of the cross-attention `[batch, heads, t_len, s_len]`)."""
    x, self_weights = self._attention_residual(
      x,
      self.self_attention_norm,
      lambda h: self.self_attention(h, bias=self_bias, training=training, return_scores=True),
      training,
    )
    x, cross_weights = self._attention_residual(
      x,
      self.cross_attention_norm,
      lambda h: self.cross_attention(
        h, memory, bias=memory_bias, training=training, return_scores=True
      ),
      training,
    )
    x = self._feed_forward_block(x, training)
    return (x, self_weights, cross_weights) if return_attention else x

  def step(
    self,
    x: tf.Tensor,
    step,
    cache: SelfAttentionCache,
    memory_key_value: KeyValue,
    memory_bias,
    beams: int = 1,
  ) -> Tuple[tf.Tensor, SelfAttentionCache]:
    """One decoding step (no dropout).

    Args:
      x: `[batch * beams, 1, d_model]`, the input at position `step`.
      step: int32 scalar, the position of `x`.
      cache: this layer's self-attention cache of positions `0..step - 1`; not modified.
      memory_key_value: this layer's projected memory (`CrossAttention.project_memory`),
        `[batch, heads, s_len, depth]`: one an example, whatever its beams.
      memory_bias: `[batch, 1, 1, s_len]`.
      beams: rows of `x` an example (a Python int).
    Returns:
      (`[batch * beams, 1, d_model]`, the cache with position `step` added).
    """
    # Spelled out, not through `_residual`: the cached self-attention also returns a cache.
    attended, cache = self.self_attention.step(
      self._sublayer_input(x, self.self_attention_norm), step, cache
    )
    x = self._add_residual(x, attended, self.self_attention_norm, training=False)
    x = self._residual(
      x,
      self.cross_attention_norm,
      lambda h: self.cross_attention.attend_beams(h, memory_key_value, memory_bias, beams),
      False,
    )
    return self._feed_forward_block(x, False), cache


def _make_position(config: TransformerConfig, name):
  if config.position_encoding == "learned":
    return LearnedPosition(config.max_length, config.d_model, config.seed, name=name)
  return SinusoidalPosition(config.d_model, name=name, layout=config.sinusoid_layout)


class _Stack(tf.Module):
  """Embedding + positions + dropout in front of N layers; a final norm when pre-norm."""

  def __init__(
    self,
    config: TransformerConfig,
    embedding,
    rng,
    layer_class,
    num_layers: int,
    name: Optional[str] = None,
  ):
    """Creates positions, layers and (pre-norm) the final norm.

    Args:
      config: model sizes, dropout rates, norm position and position encoding.
      embedding: the `Embedding` to read token ids with (shared with another stack or not).
      rng: the model's `tf.random.Generator` for dropout masks (None: no dropout).
      layer_class: `EncoderLayer` or `DecoderLayer`.
      num_layers: how many layers to stack.
      name: module name, "encoder" or "decoder".
    """
    super().__init__(name=name)
    self.config = config
    self.compute_dtype = tf.as_dtype(config.compute_dtype)
    self._rng = rng
    with self.name_scope:
      self.embedding = embedding
      self.position = _make_position(config, "position")
      self.layers = [layer_class(config, rng, name=f"layer_{i}") for i in range(num_layers)]
      self.final_norm = (
        LayerNorm(config.d_model, config.layer_norm_epsilon, name="final_norm")
        if config.norm_position == "pre"
        else None
      )

  def _embed(self, ids, training, offset=0, segments=None):
    """ids `[batch, length]` -> `[batch, length, d_model]`; with `segments` (a packed row's
    segment ids, `[batch, length]`) positions restart at 0 at each segment."""
    x = self.embedding(ids, self.compute_dtype)
    if segments is None:
      x = self.position(x, offset)
    else:
      positions = position.segment_positions(segments)  # [batch, length], each below length
      x += tf.cast(self.position.at(positions, limit=tf.shape(ids)[1]), x.dtype)
    return dropout(x, self.config.dropout_rate, self._rng, training)

  def _finish(self, x):
    return self.final_norm(x) if self.final_norm is not None else x


class Encoder(_Stack):
  """Token ids -> contextual vectors."""

  def __init__(self, config: TransformerConfig, embedding, rng=None, name: str = "encoder"):
    """Creates `config.num_encoder_layers` layers.

    Args:
      config: model sizes, dropout rates, norm position and position encoding.
      embedding: the source `Embedding`.
      rng: the model's `tf.random.Generator` for dropout masks (None: no dropout).
      name: module name.
    """
    super().__init__(config, embedding, rng, EncoderLayer, config.num_encoder_layers, name=name)

  def __call__(self, ids, bias=None, training=False, return_attention=False, segments=None):
    """ids: int `[batch, s_len]` -> `[batch, s_len, d_model]` (and, with `return_attention`, a
    tuple of float32 `[batch, heads, s_len, s_len]` weights, one a layer); bias defaults to
    padding, or with `segments` (packed rows' segment ids `[batch, s_len]`, 0 for padding) to
    each token's own segment, whose positions start at 0."""
    if bias is None:
      bias = (
        masking.padding_bias(ids, self.config.pad_id)
        if segments is None
        else masking.segment_bias(segments, segments)
      )
    x = self._embed(ids, training, segments=segments)
    weights = []
    for layer in self.layers:
      x, layer_weights = layer(x, bias, training, return_attention=True)
      weights.append(layer_weights)
    x = self._finish(x)
    return (x, tuple(weights)) if return_attention else x


class Decoder(_Stack):
  """Shifted target ids + encoder output -> decoder states (before the output projection)."""

  def __init__(self, config: TransformerConfig, embedding, rng=None, name: str = "decoder"):
    """Creates `config.num_decoder_layers` layers.

    Args:
      config: model sizes, dropout rates, norm position and position encoding.
      embedding: the target `Embedding`.
      rng: the model's `tf.random.Generator` for dropout masks (None: no dropout).
      name: module name.
    """
    super().__init__(config, embedding, rng, DecoderLayer, config.num_decoder_layers, name=name)

  def __call__(
    self, ids, memory, memory_bias=None, training=False, return_attention=False, segments=None
  ):
    """Teacher-forced: ids int `[batch, t_len]`, memory `[batch, s_len, d_model]` ->
    `[batch, t_len, d_model]` (and, with `return_attention`, two tuples of float32 weights, one
    entry a layer: self-attention `[batch, heads, t_len, t_len]`, cross-attention `[batch,
    heads, t_len, s_len]`). With `segments` (packed rows' segment ids `[batch, t_len]`), a
    token sees only the earlier tokens of its own segment, whose positions start at 0;
    `memory_bias` then keeps the cross-attention in the segment too."""
    # The self-attention is causal (and windowed) by itself; packed rows add their segments.
    self_bias = None if segments is None else masking.segment_bias(segments, segments)
    x = self._embed(ids, training, segments=segments)
    self_weights, cross_weights = [], []
    for layer in self.layers:
      x, layer_self, layer_cross = layer(
        x, memory, self_bias, memory_bias, training, return_attention=True
      )
      self_weights.append(layer_self)
      cross_weights.append(layer_cross)
    x = self._finish(x)
    return (x, tuple(self_weights), tuple(cross_weights)) if return_attention else x

  def step(
    self, ids: tf.Tensor, step, cache: DecoderCache, memory: DecodingMemory
  ) -> Tuple[tf.Tensor, DecoderCache]:
    """One decoding step (no dropout).

    Args:
      ids: int `[batch, 1]`, the token at position `step`.
      step: int32 scalar, the position of `ids` (0 for the start token).
      cache: one self-attention cache a layer, holding positions `0..step - 1`; not modified.
      memory: the projected source (`Transformer.decoding_memory`); with `memory.beams` > 1,
        `ids` holds `memory.beams` rows an example.
    Returns:
      (`[batch, 1, d_model]`, the cache with position `step` added).
    """
    x = self._embed(ids, False, offset=step)  # [batch, 1, d_model]
    new_cache = []
    for layer, layer_cache, memory_key_value in zip(self.layers, cache, memory.key_values):
      x, layer_cache = layer.step(x, step, layer_cache, memory_key_value, memory.bias, memory.beams)
      new_cache.append(layer_cache)
    return self._finish(x), tuple(new_cache)


class Transformer(tf.Module):
  """Encoder-decoder Transformer for sequence-to-sequence tasks; returns float32 logits."""

  def __init__(self, config: TransformerConfig, name: str = "transformer"):
    """Creates every variable from the config.

    Args:
      config: the model's sizes and options; `num_decoder_layers` must be at least 1.
      name: module name, the root of the variable names.
    """
    super().__init__(name=name)
    if config.num_decoder_layers < 1:
      raise ValueError(
        "A Transformer needs num_decoder_layers >= 1 (decoding has nothing to "
        "run otherwise); an EncoderClassifier ignores num_decoder_layers"
      )
    self.config = config
    c = config
    with self.name_scope:
      # One checkpointed generator drives every dropout mask (exact resume, per-replica streams).
      self.dropout_rng = tf.random.Generator.from_seed(c.seed)
      source_embedding = Embedding(
        c.source_vocab_size, c.d_model, c.seed, name="source_embedding", init=c.embedding_init
      )
      target_embedding = (
        source_embedding
        if c.share_embeddings
        else Embedding(
          c.target_vocab_size,
          c.d_model,
          c.seed,
          name="target_embedding",
          init=c.embedding_init,
        )
      )
      self.encoder = Encoder(c, source_embedding, self.dropout_rng)
      self.decoder = Decoder(c, target_embedding, self.dropout_rng)
      self.output_projection = (
        None
        if c.tie_output_embedding
        else Linear(c.d_model, c.target_vocab_size, seed=c.seed, name="output_projection")
      )
      # Marian's final_logits_bias; an untied projection has a bias of its own already.
      self.output_bias = (
        tf.Variable(tf.zeros([c.target_vocab_size]), name="output_bias")
        if c.output_bias and c.tie_output_embedding
        else None
      )

  def encode(self, source_ids: tf.Tensor, training: bool = False) -> Tuple[tf.Tensor, tf.Tensor]:
    """source_ids: int `[batch, s_len]` -> (memory `[batch, s_len, d_model]`,
    memory_bias `[batch, 1, 1, s_len]`)."""
    memory_bias = masking.padding_bias(source_ids, self.config.pad_id)
    return self.encoder(source_ids, memory_bias, training), memory_bias

  def decode(
    self, target_ids: tf.Tensor, memory: tf.Tensor, memory_bias: tf.Tensor, training: bool = False
  ) -> tf.Tensor:
    """Teacher-forced: target_ids int `[batch, t_len]` -> float32 logits
    `[batch, t_len, target_vocab]`."""
    return self._logits(self.decoder(target_ids, memory, memory_bias, training))

  def __call__(
    self,
    source_ids: tf.Tensor,
    target_ids: tf.Tensor,
    training: bool = False,
    return_attention: bool = False,
    source_segments: Optional[tf.Tensor] = None,
    target_segments: Optional[tf.Tensor] = None,
  ):
    """Teacher-forced logits: float32 `[batch, t_len, target_vocab]`.

    Args:
      source_ids: int `[batch, s_len]`, padded with `pad_id`.
      target_ids: int `[batch, t_len]`, the decoder inputs (targets shifted right, starting
        with the config's `start_id`; in a packed row, each segment starts with it).
      training: apply dropout.
      return_attention: a Python bool; also return the `AttentionWeights` of this pass.
      source_segments, target_segments: None, or both, for packed rows (several pairs a row):
        int `[batch, s_len]` and `[batch, t_len]`, the pairs of a row numbered 1, 2, ... and 0
        for padding. Each pair is then computed as if alone in its row: every attention stays
        within its segment (the target's segment k reads the source's segment k) and
        positions restart at 0 at each segment. Not with an `attention_window`.
    Returns:
      logits, or (logits, `AttentionWeights`) with `return_attention`.
    """
    if (source_segments is None) != (target_segments is None):
      raise ValueError("Packed rows need both source_segments and target_segments")
    if source_segments is None:
      memory_bias = masking.padding_bias(source_ids, self.config.pad_id)  # [batch, 1, 1, s_len]
      encoder_bias = memory_bias
    else:
      if self.config.attention_window is not None:
        raise ValueError(
          "Packed rows (segment ids) need full attention: the windowed attention takes a key "
          "mask only"
        )
      encoder_bias = masking.segment_bias(source_segments, source_segments)
      memory_bias = masking.segment_bias(target_segments, source_segments)  # [b, 1, t, s]
    memory, encoder_weights = self.encoder(
      source_ids, encoder_bias, training, return_attention=True, segments=source_segments
    )
    states, decoder_weights, cross_weights = self.decoder(
      target_ids, memory, memory_bias, training, return_attention=True, segments=target_segments
    )
    logits = self._logits(states)
    if not return_attention:
      return logits
    return logits, AttentionWeights(encoder_weights, decoder_weights, cross_weights)

  def _logits(self, states):
    """`[batch, t_len, d_model]` -> float32 `[batch, t_len, target_vocab]`."""
    if self.output_projection is None:
      logits = self.decoder.embedding.logits(states)
    else:
      logits = self.output_projection(states)
    logits = tf.cast(logits, tf.float32)
    if self.output_bias is not None:
      logits += self.output_bias  # [target_vocab], broadcast over every position
    return logits

  def decoding_memory(
    self, memory: tf.Tensor, memory_bias: tf.Tensor, beams: int = 1
  ) -> DecodingMemory:
    """The encoder output as decoding steps read it: every layer's cross-attention keys and
    values, projected once per source, for steps of `beams` rows an example. memory:
    `[batch, s_len, d_model]`; memory_bias `[batch, 1, 1, s_len]`."""
    key_values = tuple(
      layer.cross_attention.project_memory(memory) for layer in self.decoder.layers
    )
    return DecodingMemory(key_values, memory_bias, beams)

  def init_cache(self, batch_size, max_length=None) -> DecoderCache:
    """An empty self-attention cache for every decoder layer.

    Args:
      batch_size: int32 scalar, rows to decode.
      max_length: None for a `GrowingCache` (`[batch, heads, 0, depth]`, appended each step;
        graph mode); else a `PaddedCache` of `max_length` zero slots, static shapes for XLA.
        Ignored with an `attention_window` r: a `RingCache` of r + 1 slots (static shapes).
    """
    c = self.config
    empty = empty_cache(
      batch_size,
      c.num_heads,
      c.depth,
      tf.as_dtype(c.compute_dtype),
      window=c.attention_window,
      slots=max_length,
    )
    return tuple(empty for _ in self.decoder.layers)

  def decode_step(
    self, token_ids: tf.Tensor, step, cache: DecoderCache, memory: DecodingMemory
  ) -> Tuple[tf.Tensor, DecoderCache]:
    """Logits for the token after `token_ids`, and the cache that includes it.

    Args:
      token_ids: int32 `[batch]`, the tokens at position `step` (the start token at 0).
      step: int32 scalar, their position: the number of tokens before them.
      cache: from `init_cache` or the previous step; not modified.
      memory: from `decoding_memory`.
    Returns:
      (float32 logits `[batch, target_vocab]`, the new cache, same structure and layout).
    """
    states, cache = self.decoder.step(token_ids[:, tf.newaxis], step, cache, memory)
    return self._logits(states)[:, 0], cache  # [batch, target_vocab]

  def decoding_lengths(self, source_ids: tf.Tensor, options: DecodeOptions):
    """The seq2seq length rule: (the output buffer size, int32 `[batch]` the tokens each example
    may generate). `max_decode_length` when set (capped by `max_length`: the decoder has no
    position past it); else each example's own (unpadded) source
    length + `extra_decode_length`, capped by `max_length`, so an output never depends on the
    other sources in its batch (the buffer: the padded source length + extra, capped)."""
    batch = tf.shape(source_ids)[0]
    extra, cap = options.extra_decode_length, self.config.max_length
    if options.max_decode_length is not None:  # never past the decoder's positions either
      length = min(options.max_decode_length, cap)
      return length, tf.fill([batch], tf.constant(length, tf.int32))
    lengths = tf.reduce_sum(tf.cast(tf.not_equal(source_ids, self.config.pad_id), tf.int32), 1)
    return tf.minimum(tf.shape(source_ids)[1] + extra, cap), tf.minimum(lengths + extra, cap)

  def start_decoding(
    self,
    source_ids: tf.Tensor,
    options: DecodeOptions,
    *,
    beams: int = 1,
    padded: bool = False,
  ) -> decoding.DecodingStart:
    """How decoding `source_ids` starts: the source encoded and projected once, an empty cache
    for `batch * beams` rows, the start token, and each example's limit from its own source
    length (`decoding_lengths`).

    Args:
      source_ids: int32 `[batch, s_len]`.
      options: the decoding options (here: the length limits).
      beams: rows per example (a beam search's beam size).
      padded: the fixed-size `PaddedCache` that compiles under `jit_compile=True`.
    """
    c = self.config
    decoding.check_banned_ids(options, c.target_vocab_size)
    batch = tf.shape(source_ids)[0]
    length, limits = self.decoding_lengths(source_ids, options)
    memory, memory_bias = self.encode(source_ids)  # [batch, s_len, d_model], [batch, 1, 1, s_len]
    # Keys and values once per source, not once per beam: an example's beams are the queries
    # of one attention (the projection of tiled memories was ~8% of a base-size beam search).
    projected = self.decoding_memory(memory, memory_bias, beams)
    cache = self.init_cache(batch * beams, length if padded else None)

    def step_fn(ids, last_tokens, step, cache, memory):
      del ids  # the cache holds what came before
      return self.decode_step(last_tokens, step, cache, DecodingMemory(*memory, beams))

    return decoding.DecodingStart(
      step_fn=step_fn,
      cache=cache,
      first_tokens=tf.fill([batch], c.start_id),
      limits=limits,
      length=length,
      max_steps=max(c.max_length, options.max_decode_length or 0),
      pad_id=c.pad_id,
      eos_id=c.eos_id,
      cache_shapes=cache_loop_shapes(cache),
      memory=(projected.key_values, projected.bias),  # per example: finished ones leave
      compact=not padded,
    )

  def uncached_start(
    self, source_ids: tf.Tensor, options: DecodeOptions, *, beams: int = 1
  ) -> decoding.DecodingStart:
    """`start_decoding`'s search through the slow reference step, graph mode: no cache, each
    step runs the teacher-forced decoder on START and the ids so far over the source encoded
    once (`tfattn.support.reference_decoding` checks the cached searches against it)."""
    start = self.start_decoding(source_ids, options, beams=beams)
    memory, memory_bias = self.encode(source_ids)  # [batch, s_len, d_model], [batch, 1, 1, s_len]

    def step_fn(ids, last_tokens, step, cache, memory):
      del last_tokens  # ids[:, step]
      if beams > 1:  # [rows, s_len, d_model], [rows, 1, 1, s_len]
        memory = tf.nest.map_structure(lambda t: decoding.tile_beams(t, beams), memory)
      prefix = ids[:, : step + 1]  # [rows, step + 1]: START and the tokens so far
      return self.decode(prefix, *memory)[:, -1], cache

    return start._replace(
      step_fn=step_fn, cache=(), cache_shapes=None, memory=(memory, memory_bias)
    )


class AttentionEncoder(tf.Module):
  """Embedding + positions + one merged-head self-attention, nothing else: the single attention
  layer of Su Jianlin's IMDB experiment (`classifier_body="attention"`)."""

  def __init__(
    self, config: TransformerConfig, embedding, rng=None, name: str = "attention_encoder"
  ):
    """Creates the positions and the self-attention.

    Args:
      config: model sizes and position encoding.
      embedding: the `Embedding` to read token ids with.
      rng: the model's `tf.random.Generator` for attention dropout (None: no dropout).
      name: module name.
    """
    super().__init__(name=name)
    self.config = config
    self.compute_dtype = tf.as_dtype(config.compute_dtype)
    with self.name_scope:
      self.embedding = embedding
      self.position = _make_position(config, "position")
      self.self_attention = SelfAttention(
        config.d_model,
        config.num_heads,
        config.attention_dropout_rate,
        rng,
        seed=config.seed,
        name="self_attention",
        window=config.attention_window,
      )

  def __call__(self, ids, bias=None, training=False, return_attention=False):
    """ids: int `[batch, length]` -> `[batch, length, d_model]` (and, with `return_attention`,
    a one-tuple of the float32 `[batch, heads, length, length]` weights); bias defaults to
    padding."""
    if bias is None:
      bias = masking.padding_bias(ids, self.config.pad_id)
    x = self.position(self.embedding(ids, self.compute_dtype))
    x, weights = self.self_attention(x, bias=bias, training=training, return_scores=True)
    return (x, (weights,)) if return_attention else x


class EncoderClassifier(tf.Module):
  """Encoder, masked pooling and a dense layer: text classification (e.g. IMDB sentiment)."""

  def __init__(self, config: TransformerConfig, name: str = "encoder_classifier"):
    """Creates every variable from the config.

    Args:
      config: the model's sizes and options (`num_classes`, `pooling`, `classifier_body`).
      name: module name, the root of the variable names.
    """
    super().__init__(name=name)
    self.config = config
    with self.name_scope:
      self.dropout_rng = tf.random.Generator.from_seed(config.seed)
      embedding = Embedding(
        config.source_vocab_size,
        config.d_model,
        config.seed,
        name="embedding",
        init=config.embedding_init,
      )
      if config.classifier_body == "attention":
        self.encoder = AttentionEncoder(config, embedding, self.dropout_rng)
      else:
        self.encoder = Encoder(config, embedding, self.dropout_rng)
      self.classifier = Linear(
        config.d_model, config.num_classes, seed=config.seed, name="classifier"
      )

  def __call__(self, ids, training=False, return_attention=False):
    """ids: int `[batch, length]` -> float32 logits `[batch, num_classes]`, or (logits,
    `AttentionWeights` with only `encoder`: one `[batch, heads, length, length]` a layer) when
    `return_attention` (a Python bool)."""
    if self.config.pooling == "first":  # a zero-width batch (empty texts) gets a first slot of
      # padding, as an empty text has in a batch (it failed alone: slice index 0 out of bounds)
      width = tf.maximum(1 - tf.shape(ids)[1], 0)
      ids = tf.pad(ids, [[0, 0], [0, width]], constant_values=self.config.pad_id)
    states, weights = self.encoder(ids, training=training, return_attention=True)
    if self.config.pooling == "first":
      pooled = states[:, 0]
    else:
      valid = tf.cast(tf.not_equal(ids, self.config.pad_id), states.dtype)[..., tf.newaxis]
      # max(count, 1) keeps an all-padding row finite.
      pooled = tf.reduce_sum(states * valid, axis=1) / tf.maximum(
        tf.reduce_sum(valid, axis=1), tf.cast(1.0, states.dtype)
      )
    pooled = dropout(pooled, self.config.dropout_rate, self.dropout_rng, training)
    logits = tf.cast(self.classifier(pooled), tf.float32)
    return (logits, AttentionWeights(encoder=weights)) if return_attention else logits
