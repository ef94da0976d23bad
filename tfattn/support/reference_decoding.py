"""The slow reference decoding: each step re-runs a model's teacher-forced forward pass on the
whole prefix, with no cache. Tests compare the cached searches (graph mode, XLA, windowed) with
it, and `benchmarks/decode_speed.py` times it against the cache.

  found = reference_decode(model, inputs, options, seeds=seeds)  # what decoding.decode finds

It uses only the models' public API: the length rules, limits and first tokens come from the
model's own `start_decoding`; only the step and its cache are replaced.
"""

from typing import Optional

import tensorflow as tf

from tfattn import decoding
from tfattn.decode_options import BEAM, SAMPLE, DecodeOptions
from tfattn.language_model import LanguageModel


def _transformer_start(model, source_ids, options, beams):
  """The source encoded once; each step runs the decoder on START and the ids so far."""
  start = model.start_decoding(source_ids, options, beams=beams)
  memory, memory_bias = model.encode(source_ids)  # [batch, s_len, d_model], [batch, 1, 1, s_len]
  if beams > 1:
    memory = decoding.tile_beams(memory, beams)  # [rows, s_len, d_model]
    memory_bias = decoding.tile_beams(memory_bias, beams)

  def step_fn(ids, last_tokens, step, cache):
    del last_tokens  # ids[:, step]
    prefix = ids[:, : step + 1]  # [rows, step + 1]: START and the tokens so far
    return model.decode(prefix, memory, memory_bias)[:, -1], cache

  return start._replace(step_fn=step_fn, cache=(), cache_shapes=None)


def _language_model_start(model, prompt_ids, options, beams):
  """Each step runs the model on BOS, the prompt and the tokens so far, right-padded (each row
  from column 0, as the model trains), and reads each row's logits at its newest token."""
  c = model.config
  start = model.start_decoding(prompt_ids, options, beams=beams)
  batch = tf.shape(prompt_ids)[0]
  context = tf.concat([tf.fill([batch, 1], c.bos_id), tf.cast(prompt_ids, tf.int32)], 1)
  lengths = 1 + tf.reduce_sum(tf.cast(tf.not_equal(prompt_ids, c.pad_id), tf.int32), 1)
  if beams > 1:
    context, lengths = decoding.tile_beams(context, beams), decoding.tile_beams(lengths, beams)
  before = lengths[:, tf.newaxis] - 1  # [rows, 1]: BOS and the prompt before its last token
  columns = tf.shape(context)[1]

  def step_fn(ids, last_tokens, step, cache):
    del last_tokens  # ids[:, step]; ids[:, 0] is the prompt's last token
    column = tf.range(columns + step)[tf.newaxis]  # [1, columns + step]
    index = column - before  # [rows, columns + step]: where in ids, when >= 0
    in_context = tf.broadcast_to(tf.minimum(column, columns - 1), tf.shape(index))
    from_context = tf.gather(context, in_context, batch_dims=1)
    from_ids = tf.gather(ids, tf.clip_by_value(index, 0, step), batch_dims=1)
    sequence = tf.where(
      index < 0, from_context, tf.where(index <= step, from_ids, c.pad_id)
    )  # [rows, columns + step]
    newest = before[:, 0] + step  # [rows]
    return tf.gather(model(sequence), newest, batch_dims=1), cache

  return start._replace(step_fn=step_fn, cache=(), cache_shapes=None)


def reference_start(model, inputs: tf.Tensor, options: DecodeOptions, beams: int = 1):
  """The model's `DecodingStart` (a `Transformer`'s or a `LanguageModel`'s) with the uncached
  step: `inputs` int32 `[batch, length]` (a source, a prompt), `beams` rows per example."""
  if isinstance(model, LanguageModel):
    return _language_model_start(model, inputs, options, beams)
  return _transformer_start(model, inputs, options, beams)


def reference_decode(
  model, inputs: tf.Tensor, options: DecodeOptions, *, seeds: Optional[tf.Tensor] = None
) -> decoding.Hypotheses:
  """`decoding.decode` through the uncached step: ids int32 `[batch, length]`, scores and
  log_probs float32 `[batch]` (graph mode; its shapes grow each step, so not under XLA)."""
  if options.strategy == BEAM and options.beam_size > 1:
    start = reference_start(model, inputs, options, options.beam_size)
    return decoding.first_beam(decoding.beam_search(start, options))
  start = reference_start(model, inputs, options)
  if options.strategy == SAMPLE:
    return decoding.sample_loop(start, options, seeds)
  return decoding.token_loop(start, options)
