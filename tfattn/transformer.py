"""The Transformer (Vaswani et al., 2017) and an encoder-only classifier, as `tf.Module`s."""

import tensorflow as tf

from tfattn import masking
from tfattn.attention import MultiHeadAttention
from tfattn.config import TransformerConfig
from tfattn.layers import Embedding, FeedForward, LayerNorm, Linear, dropout
from tfattn.position import LearnedPosition, SinusoidalPosition


class _ResidualLayer(tf.Module):
  """What encoder and decoder layers share: self-attention and feed-forward sublayers, each in
  residual wiring, post-norm LN(x + Sublayer(x)) or pre-norm x + Sublayer(LN(x))."""

  def __init__(self, config: TransformerConfig, rng=None, name=None):
    super().__init__(name=name)
    c = config
    self.pre_norm = c.norm_position == "pre"
    self.dropout_rate = c.dropout_rate
    self._rng = rng
    with self.name_scope:
      self.self_attention = MultiHeadAttention(c.d_model, c.num_heads, True,
                                               c.attention_dropout_rate, rng, c.seed,
                                               name="self_attention")
      self.self_attention_norm = LayerNorm(c.d_model, c.layer_norm_epsilon,
                                           name="self_attention_norm")
      self.feed_forward = FeedForward(c.d_model, c.dff, c.feed_forward_dropout_rate, rng,
                                      c.seed, name="feed_forward")
      self.feed_forward_norm = LayerNorm(c.d_model, c.layer_norm_epsilon,
                                         name="feed_forward_norm")

  def _residual(self, x, norm, sublayer, training):
    if self.pre_norm:
      return x + dropout(sublayer(norm(x)), self.dropout_rate, self._rng, training)
    return norm(x + dropout(sublayer(x), self.dropout_rate, self._rng, training))

  def _feed_forward_block(self, x, training):
    return self._residual(x, self.feed_forward_norm,
                          lambda h: self.feed_forward(h, training=training), training)


class EncoderLayer(_ResidualLayer):
  """Self-attention then feed-forward, each wrapped in a residual + layer norm."""

  def __call__(self, x, bias=None, training=False):
    """x: `[batch, length, d_model]`; bias: `[batch, 1, 1, length]` -> `[batch, length, d_model]`."""
    x = self._residual(x, self.self_attention_norm,
                       lambda h: self.self_attention(h, bias=bias, training=training), training)
    return self._feed_forward_block(x, training)


class DecoderLayer(_ResidualLayer):
  """Masked self-attention, cross-attention over the encoder output, then feed-forward."""

  def __init__(self, config: TransformerConfig, rng=None, name=None):
    super().__init__(config, rng, name=name)
    c = config
    with self.name_scope:
      self.cross_attention = MultiHeadAttention(c.d_model, c.num_heads, False,
                                                c.attention_dropout_rate, rng, c.seed,
                                                name="cross_attention")
      self.cross_attention_norm = LayerNorm(c.d_model, c.layer_norm_epsilon,
                                            name="cross_attention_norm")

  def __call__(self, x, memory, self_bias=None, memory_bias=None, training=False, cache=None,
               decode_index=None):
    """x: `[batch, t_len, d_model]`, memory: `[batch, s_len, d_model]` -> like x.

    cache: this layer's decoding state (see `Transformer.init_cache`), updated in place.
    """
    memory_key_value = None
    if cache is not None:
      memory_key_value = (cache["memory_key"], cache["memory_value"])
    x = self._residual(
        x, self.self_attention_norm,
        lambda h: self.self_attention(h, bias=self_bias, training=training, cache=cache,
                                      decode_index=decode_index), training)
    x = self._residual(
        x, self.cross_attention_norm,
        lambda h: self.cross_attention(h, memory, bias=memory_bias, training=training,
                                       memory_key_value=memory_key_value), training)
    return self._feed_forward_block(x, training)


def _make_position(config: TransformerConfig, name):
  if config.position_encoding == "learned":
    return LearnedPosition(config.max_length, config.d_model, config.seed, name=name)
  return SinusoidalPosition(config.d_model, name=name)


class _Stack(tf.Module):
  """Embedding + positions + dropout in front of N layers; a final norm when pre-norm."""

  def __init__(self, config, embedding, rng, layer_class, num_layers, name=None):
    super().__init__(name=name)
    self.config = config
    self.compute_dtype = tf.as_dtype(config.compute_dtype)
    self._rng = rng
    with self.name_scope:
      self.embedding = embedding
      self.position = _make_position(config, "position")
      self.layers = [layer_class(config, rng, name=f"layer_{i}") for i in range(num_layers)]
      self.final_norm = (LayerNorm(config.d_model, config.layer_norm_epsilon, name="final_norm")
                         if config.norm_position == "pre" else None)

  def _embed(self, ids, training, offset=0):
    x = self.position(self.embedding(ids, self.compute_dtype), offset)
    return dropout(x, self.config.dropout_rate, self._rng, training)

  def _finish(self, x):
    return self.final_norm(x) if self.final_norm is not None else x


class Encoder(_Stack):
  """Token ids -> contextual vectors."""

  def __init__(self, config: TransformerConfig, embedding, rng=None, name="encoder"):
    super().__init__(config, embedding, rng, EncoderLayer, config.num_encoder_layers, name=name)

  def __call__(self, ids, bias=None, training=False):
    """ids: int `[batch, s_len]` -> `[batch, s_len, d_model]`; bias defaults to padding."""
    if bias is None:
      bias = masking.padding_bias(ids, self.config.pad_id)
    x = self._embed(ids, training)
    for layer in self.layers:
      x = layer(x, bias, training)
    return self._finish(x)


class Decoder(_Stack):
  """Shifted target ids + encoder output -> decoder states (before the output projection)."""

  def __init__(self, config: TransformerConfig, embedding, rng=None, name="decoder"):
    super().__init__(config, embedding, rng, DecoderLayer, config.num_decoder_layers, name=name)

  def __call__(self, ids, memory, memory_bias=None, training=False, cache=None,
               decode_index=None):
    """ids: int `[batch, t_len]`; memory: `[batch, s_len, d_model]` -> `[batch, t_len, d_model]`.

    With `cache`, ids is the single newest token `[batch, 1]` (see `Transformer.decode`).
    """
    if cache is None:
      offset, self_bias = 0, masking.causal_bias(tf.shape(ids)[1])
    elif decode_index is None:
      # Growing cache: the one new query may see every cached key.
      offset, self_bias = tf.shape(cache["layer_0"]["key"])[2], None
    else:
      offset = decode_index
      self_bias = masking.step_bias(decode_index, tf.shape(cache["layer_0"]["key"])[2])
    x = self._embed(ids, training, offset)
    for i, layer in enumerate(self.layers):
      layer_cache = cache[f"layer_{i}"] if cache is not None else None
      x = layer(x, memory, self_bias, memory_bias, training, layer_cache, decode_index)
    return self._finish(x)


class Transformer(tf.Module):
  """Encoder-decoder Transformer for sequence-to-sequence tasks; returns float32 logits."""

  def __init__(self, config: TransformerConfig, name="transformer"):
    super().__init__(name=name)
    if config.num_decoder_layers < 1:
      raise ValueError("A Transformer needs num_decoder_layers >= 1 (decoding has nothing to "
                       "run otherwise); an EncoderClassifier ignores num_decoder_layers")
    self.config = config
    c = config
    with self.name_scope:
      # One checkpointed generator drives every dropout mask (exact resume, per-replica streams).
      self.dropout_rng = tf.random.Generator.from_seed(c.seed)
      source_embedding = Embedding(c.source_vocab_size, c.d_model, c.seed,
                                   name="source_embedding")
      target_embedding = (source_embedding if c.share_embeddings else
                          Embedding(c.target_vocab_size, c.d_model, c.seed,
                                    name="target_embedding"))
      self.encoder = Encoder(c, source_embedding, self.dropout_rng)
      self.decoder = Decoder(c, target_embedding, self.dropout_rng)
      self.output_projection = (None if c.tie_output_embedding else
                                Linear(c.d_model, c.target_vocab_size, seed=c.seed,
                                       name="output_projection"))

  def encode(self, source_ids, training=False):
    """source_ids: int `[batch, s_len]` -> (memory `[batch, s_len, d_model]`,
    memory_bias `[batch, 1, 1, s_len]`)."""
    memory_bias = masking.padding_bias(source_ids, self.config.pad_id)
    return self.encoder(source_ids, memory_bias, training), memory_bias

  def decode(self, target_ids, memory, memory_bias, training=False, cache=None,
             decode_index=None):
    """target_ids: int `[batch, t_len]` -> float32 logits `[batch, t_len, target_vocab]`."""
    states = self.decoder(target_ids, memory, memory_bias, training, cache, decode_index)
    if self.output_projection is None:
      logits = self.decoder.embedding.logits(states)
    else:
      logits = self.output_projection(states)
    return tf.cast(logits, tf.float32)

  def __call__(self, source_ids, target_ids, training=False):
    """Teacher-forced logits: float32 `[batch, t_len, target_vocab]`.

    target_ids are the decoder inputs (targets shifted right, starting with `bos_id`).
    """
    memory, memory_bias = self.encode(source_ids, training)
    return self.decode(target_ids, memory, memory_bias, training)

  def init_cache(self, memory, max_length=None):
    """Decoding state for every decoder layer.

    Cross-attention keys/values are projected once here. Self-attention caches start empty
    (`[batch, heads, 0, depth]`, growing) or, with `max_length`, as zeros of fixed length for
    padded (XLA) decoding.
    """
    batch = tf.shape(memory)[0]
    length = 0 if max_length is None else max_length
    heads, depth = self.config.num_heads, self.config.depth
    cache = {}
    for i, layer in enumerate(self.decoder.layers):
      memory_key, memory_value = layer.cross_attention.project_memory(memory)
      empty = tf.zeros([batch, heads, length, depth], memory.dtype)
      cache[f"layer_{i}"] = {"key": empty, "value": empty, "memory_key": memory_key,
                             "memory_value": memory_value}
    return cache


class AttentionEncoder(tf.Module):
  """Embedding + positions + one merged-head self-attention, nothing else: the single attention
  layer of Su Jianlin's IMDB experiment (`classifier_body="attention"`)."""

  def __init__(self, config: TransformerConfig, embedding, name="attention_encoder"):
    super().__init__(name=name)
    self.config = config
    self.compute_dtype = tf.as_dtype(config.compute_dtype)
    with self.name_scope:
      self.embedding = embedding
      self.position = _make_position(config, "position")
      self.self_attention = MultiHeadAttention(config.d_model, config.num_heads, True,
                                               config.attention_dropout_rate, seed=config.seed,
                                               name="self_attention")

  def __call__(self, ids, bias=None, training=False):
    """ids: int `[batch, length]` -> `[batch, length, d_model]`; bias defaults to padding."""
    if bias is None:
      bias = masking.padding_bias(ids, self.config.pad_id)
    x = self.position(self.embedding(ids, self.compute_dtype))
    return self.self_attention(x, bias=bias, training=training)


class EncoderClassifier(tf.Module):
  """Encoder, masked pooling and a dense layer: text classification (e.g. IMDB sentiment)."""

  def __init__(self, config: TransformerConfig, name="encoder_classifier"):
    super().__init__(name=name)
    self.config = config
    with self.name_scope:
      self.dropout_rng = tf.random.Generator.from_seed(config.seed)
      embedding = Embedding(config.source_vocab_size, config.d_model, config.seed,
                            name="embedding")
      if config.classifier_body == "attention":
        self.encoder = AttentionEncoder(config, embedding)
      else:
        self.encoder = Encoder(config, embedding, self.dropout_rng)
      self.classifier = Linear(config.d_model, config.num_classes, seed=config.seed,
                               name="classifier")

  def __call__(self, ids, training=False):
    """ids: int `[batch, length]` -> float32 logits `[batch, num_classes]`."""
    states = self.encoder(ids, training=training)
    if self.config.pooling == "first":
      pooled = states[:, 0]
    else:
      valid = tf.cast(tf.not_equal(ids, self.config.pad_id), states.dtype)[..., tf.newaxis]
      # max(count, 1) keeps an all-padding row finite.
      pooled = tf.reduce_sum(states * valid, axis=1) / tf.maximum(
          tf.reduce_sum(valid, axis=1), tf.cast(1.0, states.dtype))
    pooled = dropout(pooled, self.config.dropout_rate, self.dropout_rng, training)
    return tf.cast(self.classifier(pooled), tf.float32)
