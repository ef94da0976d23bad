"""A decoder-only language model (GPT-style, Radford et al. 2018): causal self-attention and
feed-forward layers over token embeddings and positions, the embedding tied to the output
projection, as a `tf.Module`; and how its decoding starts from a prompt.

  logits = model(ids)                                  # [batch, length, vocab], ids start with BOS
  logits = model(ids, segment_ids=segments)            # a packed row: each document on its own
  logits, weights = model(ids, return_attention=True)  # weights.decoder: one map a layer
  found = decoding.decode(model, prompt_ids, options)  # the continuation of each prompt

Decoding reads the prompt once (`start_decoding` prefills every layer's key/value cache in one
pass) and then one token a step, in graph mode (growing cache) or under XLA (padded cache); with
an `attention_window` r, in a ring of r + 1 slots (both modes: memory flat in the text's length).
Prompts of one batch differ in length: they are left-aligned to end in the same column, each row
with its own positions and its padding masked out, so a prompt generates the same continuation
whatever its batch-mates.

The config's sizes: `target_vocab_size` (= `source_vocab_size`) tokens, `num_decoder_layers`
layers, `max_length` positions (the prompt and its continuation together).
"""

import tensorflow as tf

from tfattn import decoding, masking, position
from tfattn.attention import RingCache, cache_loop_shapes, empty_cache
from tfattn.config import TransformerConfig
from tfattn.decode_options import DecodeOptions
from tfattn.layers import Embedding, dropout
from tfattn.transformer import AttentionWeights, EncoderLayer, _Stack


class CausalLayer(EncoderLayer):
  """Self-attention (causal by its class) then feed-forward, each in residual wiring; with a
  cached decoding step and a prefill of a whole prompt."""

  causal = True

  def step(self, x, step, cache, key_bias):
    """x `[rows, 1, d_model]` at cache slot `step`; key_bias `[rows, 1, 1, keys]` -> (like x,
    the cache with slot `step` written). No dropout."""
    attended, cache = self.self_attention.step(
      self._sublayer_input(x, self.self_attention_norm), step, cache, bias=key_bias
    )
    x = self._add_residual(x, attended, self.self_attention_norm, training=False)
    return self._feed_forward_block(x, False), cache

  def prefill(self, x, bias, cache):
    """x `[batch, length, d_model]`, key bias `[batch, 1, 1, length]` -> (like x, the cache
    holding slots 0..length-1). No dropout."""
    attended, cache = self.self_attention.prefill(
      self._sublayer_input(x, self.self_attention_norm), bias, cache
    )
    x = self._add_residual(x, attended, self.self_attention_norm, training=False)
    return self._feed_forward_block(x, False), cache


class CausalStack(_Stack):
  """Embedding + positions (each row its own) + dropout, `CausalLayer`s, a final norm when
  pre-norm."""

  def embed(self, ids, positions, training=False):
    """ids, positions int `[batch, length]` -> `[batch, length, d_model]`."""
    x = self.embedding(ids, self.compute_dtype)
    x += tf.cast(self.position.at(positions), self.compute_dtype)
    return dropout(x, self.config.dropout_rate, self._rng, training)

  def __call__(self, ids, positions, bias, training=False):
    """-> (`[batch, length, d_model]`, one float32 `[batch, heads, length, length]` self-
    attention map a layer)."""
    x = self.embed(ids, positions, training)
    weights = []
    for layer in self.layers:
      x, layer_weights = layer(x, bias, training, return_attention=True)
      weights.append(layer_weights)
    return self._finish(x), tuple(weights)


def _key_bias(shift, columns):
  """`[rows, 1, 1, keys]`: keys whose columns `[keys]` lie before each row's `shift` (its left
  padding) masked."""
  padding = tf.cast(columns[tf.newaxis] < shift[:, tf.newaxis], tf.float32)
  return (padding * masking.large_negative())[:, tf.newaxis, tf.newaxis, :]


def _alignment(shift, columns):
  """Rows left-padded by `shift` `[rows]` over `columns` -> (positions int32 `[rows, columns]`,
  each row's own from 0 at its first real token; key bias `[rows, 1, 1, columns]` masking the
  padding; the self-attention adds the causal mask and the window)."""
  positions = tf.maximum(tf.range(columns)[tf.newaxis] - shift[:, tf.newaxis], 0)
  return positions, _key_bias(shift, tf.range(columns))


class LanguageModel(tf.Module):
  """Decoder-only Transformer: p(token | the tokens before it); returns float32 logits."""

  def __init__(self, config: TransformerConfig, name: str = "language_model"):
    """Creates every variable from the config.

    Args:
      config: sizes and options; `target_vocab_size` tokens, `num_decoder_layers` >= 1 layers.
      name: module name, the root of the variable names.
    """
    super().__init__(name=name)
    if config.num_decoder_layers < 1:
      raise ValueError("A LanguageModel needs num_decoder_layers >= 1")
    self.config = config
    c = config
    with self.name_scope:
      self.dropout_rng = tf.random.Generator.from_seed(c.seed)
      embedding = Embedding(
        c.target_vocab_size, c.d_model, c.seed, name="embedding", init=c.embedding_init
      )
      self.decoder = CausalStack(
        c, embedding, self.dropout_rng, CausalLayer, c.num_decoder_layers, name="decoder"
      )
      self.output_bias = (
        tf.Variable(tf.zeros([c.target_vocab_size]), name="output_bias") if c.output_bias else None
      )

  def _logits(self, states):
    """`[..., d_model]` -> float32 `[..., vocab]` through the tied embedding (plus the
    config's output bias)."""
    logits = tf.cast(self.decoder.embedding.logits(states), tf.float32)
    return logits if self.output_bias is None else logits + self.output_bias

  def __call__(
    self,
    ids: tf.Tensor,
    training: bool = False,
    return_attention: bool = False,
    segment_ids=None,
  ):
    """Next-token logits of every position.

    Args:
      ids: int `[batch, length]`: BOS, the tokens, then padding (padding is never attended
        to by a real token: it comes after them); or a packed row of several documents.
      training: apply dropout.
      return_attention: a Python bool; also return the `AttentionWeights` (`decoder` only).
      segment_ids: None, or int `[batch, length]` numbering a packed row's documents (equal
        ids: one document; 0: padding): each position then attends only within its own
        document, and positions restart at 0 at each document's first token, so a packed row
        gives each document the logits it has alone (Raffel et al. 2020's packing). None: one
        sequence a row, positions 0, 1, 2, ... (a packed row without ids: attention crosses
        documents, as nanoGPT trains).
    Returns:
      float32 `[batch, length, vocab]`, or (logits, `AttentionWeights`).
    """
    if segment_ids is None:
      length = tf.shape(ids)[1]
      positions = tf.tile(tf.range(length)[tf.newaxis], [tf.shape(ids)[0], 1])
      bias = None  # causal by its layers
    else:
      if self.config.attention_window is not None:
        raise ValueError(
          "segment ids need full attention: a windowed LanguageModel takes no segment_ids"
        )
      positions = position.segment_positions(segment_ids)
      bias = masking.segment_bias(segment_ids, segment_ids)  # the layers add the causal mask
    states, weights = self.decoder(ids, positions, bias, training)
    logits = self._logits(states)
    return (logits, AttentionWeights(decoder=weights)) if return_attention else logits

  def _left_aligned(self, ids, shift):
    """Right-padded `[rows, columns]` -> the same rows moved right by `shift` `[rows]`."""
    index = tf.range(tf.shape(ids)[1])[tf.newaxis] - shift[:, tf.newaxis]  # [rows, columns]
    moved = tf.gather(ids, tf.maximum(index, 0), batch_dims=1)
    return tf.where(index >= 0, moved, self.config.pad_id)

  def start_decoding(
    self,
    prompt_ids: tf.Tensor,
    options: DecodeOptions,
    *,
    beams: int = 1,
    padded: bool = False,
  ) -> decoding.DecodingStart:
    """How continuing `prompt_ids` starts: BOS + each prompt left-aligned to one column, all but
    its last token prefilled into the cache at once, the last one read by the first step.

    Each row generates up to `options.max_decode_length` tokens (unset: its
    `extra_decode_length`), and never past position `max_length`.

    Args:
      prompt_ids: int32 `[batch, p_len]`, right-padded (a row of padding: no prompt).
      options: the decoding options (here: the length limits).
      beams: rows per example (a beam search's beam size).
      padded: the fixed-size cache that compiles under `jit_compile=True`.
    """
    c = self.config
    decoding.check_banned_ids(options, c.target_vocab_size)
    batch = tf.shape(prompt_ids)[0]
    context = tf.concat([tf.fill([batch, 1], c.bos_id), tf.cast(prompt_ids, tf.int32)], 1)
    lengths = 1 + tf.reduce_sum(tf.cast(tf.not_equal(prompt_ids, c.pad_id), tf.int32), 1)
    columns = tf.shape(context)[1]  # context: BOS, prompt, padding
    shift = columns - lengths  # [batch]: each row's left padding
    left = self._left_aligned(context, shift)  # [batch, columns]: padding, BOS, prompt
    positions, bias = _alignment(shift, columns)
    length = min(options.max_decode_length or options.extra_decode_length, c.max_length)
    # The last generated token is never read: positions up to max_length - 1 are.
    limits = tf.clip_by_value(c.max_length + 1 - lengths, 1, length)  # [batch]
    window = c.attention_window
    # A fixed layout's slots: the window's r + 1 (a ring), else the prompt and the output.
    slots = window + 1 if window is not None else columns - 1 + length
    empty = empty_cache(
      batch,
      c.num_heads,
      c.depth,
      tf.as_dtype(c.compute_dtype),
      window=window,
      slots=slots if padded else None,
    )
    x = self.decoder.embed(left[:, :-1], positions[:, :-1])  # the prompt before its last token
    cache = []
    for layer in self.decoder.layers:
      x, layer_cache = layer.prefill(x, bias[..., :-1], empty)
      cache.append(layer_cache)
    cache = tuple(cache)
    if beams > 1:
      cache = tf.nest.map_structure(lambda t: decoding.tile_beams(t, beams), cache)
    growing = window is None and not padded

    def step_fn(ids, last_tokens, step, cache, shift):
      del ids  # the cache holds what came before
      shift = decoding.tile_beams(shift, beams) if beams > 1 else shift  # [rows]
      column = columns - 1 + step  # the position of `last_tokens`
      # A row that reached its limit steps on while its batch-mates generate: its position is
      # held at the last one (its output is padding anyway), never past the position table.
      row_positions = tf.minimum(column - shift, c.max_length - 1)  # [rows]
      x = self.decoder.embed(last_tokens[:, tf.newaxis], row_positions[:, tf.newaxis])
      if window is not None:  # the column each ring slot holds
        key_columns = RingCache.slot_positions(column, slots)
      else:
        key_columns = tf.range(column + 1 if growing else slots)
      key_bias = _key_bias(shift, key_columns)
      new_cache = []
      for layer, layer_cache in zip(self.decoder.layers, cache):
        x, layer_cache = layer.step(x, column, layer_cache, key_bias)
        new_cache.append(layer_cache)
      return self._logits(self.decoder._finish(x))[:, 0], tuple(new_cache)

    return decoding.DecodingStart(
      step_fn=step_fn,
      cache=cache,
      first_tokens=left[:, -1],
      limits=limits,
      length=length,
      max_steps=length,
      pad_id=c.pad_id,
      eos_id=c.eos_id,
      cache_shapes=cache_loop_shapes(cache),
      memory=shift,  # [batch]: each example's left padding (finished ones leave)
      compact=not padded,
    )

  def uncached_start(
    self, prompt_ids: tf.Tensor, options: DecodeOptions, *, beams: int = 1
  ) -> decoding.DecodingStart:
    """`start_decoding`'s search through the slow reference step, graph mode: no cache, each
    step runs the model on BOS, the prompt and the tokens so far, right-padded (each row from
    column 0, as the model trains), and reads each row's logits at its newest token
    (`tfattn.support.reference_decoding` checks the cached searches against it)."""
    c = self.config
    start = self.start_decoding(prompt_ids, options, beams=beams)
    batch = tf.shape(prompt_ids)[0]
    context = tf.concat([tf.fill([batch, 1], c.bos_id), tf.cast(prompt_ids, tf.int32)], 1)
    lengths = 1 + tf.reduce_sum(tf.cast(tf.not_equal(prompt_ids, c.pad_id), tf.int32), 1)

    def step_fn(ids, last_tokens, step, cache, memory):
      del last_tokens  # ids[:, step]; ids[:, 0] is the prompt's last token
      if beams > 1:
        memory = tf.nest.map_structure(lambda t: decoding.tile_beams(t, beams), memory)
      context, lengths = memory  # [rows, columns], [rows]
      columns = tf.shape(context)[1]
      before = lengths[:, tf.newaxis] - 1  # [rows, 1]: BOS and the prompt before its last token
      column = tf.range(columns + step)[tf.newaxis]  # [1, columns + step]
      index = column - before  # [rows, columns + step]: where in ids, when >= 0
      in_context = tf.broadcast_to(tf.minimum(column, columns - 1), tf.shape(index))
      from_context = tf.gather(context, in_context, batch_dims=1)
      from_ids = tf.gather(ids, tf.clip_by_value(index, 0, step), batch_dims=1)
      sequence = tf.where(
        index < 0, from_context, tf.where(index <= step, from_ids, c.pad_id)
      )  # [rows, columns + step]
      newest = before[:, 0] + step  # [rows]
      return tf.gather(self(sequence), newest, batch_dims=1), cache

    return start._replace(step_fn=step_fn, cache=(), cache_shapes=None, memory=(context, lengths))


def perplexity_sums(model: LanguageModel, ids: tf.Tensor, targets: tf.Tensor, pad_id: int = 0):
  """(summed negative log-likelihood, counted tokens) of `targets` `[batch, length]` (the next
  token of each of `ids`' positions; padding not counted), float32 scalars."""
  return perplexity_sums_of_logits(model(ids), targets, pad_id)


def perplexity_sums_of_logits(logits: tf.Tensor, targets: tf.Tensor, pad_id: int = 0):
  """`perplexity_sums` from the model's logits `[batch, length, vocab]` (a caller that needs
  the logits for more than the likelihood runs the model once)."""
  log_probs = tf.nn.log_softmax(logits)
  token = tf.gather(log_probs, targets, batch_dims=2)  # [batch, length]
  mask = tf.cast(tf.not_equal(targets, pad_id), tf.float32)
  return -tf.reduce_sum(token * mask), tf.reduce_sum(mask)
