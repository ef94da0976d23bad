"""Autoregressive decoding for `Transformer`: greedy and beam search, driven by `tf.while_loop`.

Each step runs the decoder on the single newest token against an incremental key/value cache
(decoder self-attention) and cross-attention keys/values projected once from the encoder output.
Two cache layouts:
  * growing (`padded_decode=False`): keys are appended; least work, graph mode.
  * padded (`padded_decode=True`): a fixed `[.., max_decode_length, ..]` cache written in place,
    so every shape is static and the loop compiles under `jit_compile=True`.
Output buffers are always fixed-size `[batch, (beam,) max_decode_length]`, padded with `pad_id`.
"""

import tensorflow as tf

# A finite "minus infinity": products and differences with it stay finite (no NaN).
_NEG_INF = -1e9


def decode_length(model, source_ids, max_decode_length=None, extra_decode_length=50):
  """Size of the output buffer: `max_decode_length`, else the padded source length + extra,
  capped by the config's `max_length`."""
  if max_decode_length is not None:
    return max_decode_length
  return tf.minimum(tf.shape(source_ids)[1] + extra_decode_length, model.config.max_length)


def example_limits(model, source_ids, max_decode_length=None, extra_decode_length=50):
  """int32 `[batch]`: tokens each example may generate. Each example's own (unpadded) source
  length sets its limit, so an output never depends on the other sources in its batch."""
  batch = tf.shape(source_ids)[0]
  if max_decode_length is not None:
    return tf.fill([batch], tf.cast(max_decode_length, tf.int32))
  lengths = tf.reduce_sum(tf.cast(tf.not_equal(source_ids, model.config.pad_id), tf.int32), 1)
  return tf.minimum(lengths + extra_decode_length, model.config.max_length)


def _write_column(buffer, index, values):
  """buffer `[..., length]`: sets column `index` to `values` `[...]`, static shapes (XLA-safe)."""
  column = tf.one_hot(index, tf.shape(buffer)[-1], on_value=True, off_value=False)
  return tf.where(column, values[..., tf.newaxis], buffer)


def _loop_shape_invariants(loop_vars, growing_cache):
  """Only a growing cache's length axis changes between steps; every other shape stays as it
  is, so heads and depth stay static and shape arithmetic folds away. The cache is the last
  loop variable."""
  if not growing_cache:
    return None
  *state, cache = loop_vars

  def relax(name, tensor):
    if name in ("key", "value"):  # [batch, heads, cached length, depth]
      return tf.TensorShape([tensor.shape[0], tensor.shape[1], None, tensor.shape[3]])
    return tensor.shape

  layers = {layer: {name: relax(name, t) for name, t in values.items()}
            for layer, values in cache.items()}
  return tuple(t.shape for t in state) + (layers,)


def greedy_decode(model, source_ids, max_decode_length=None, extra_decode_length=50,
                  use_cache=True, padded_decode=False):
  """Picks the most likely token at every step until EOS.

  Args:
    model: a `tfattn.Transformer`.
    source_ids: int32 `[batch, s_len]`.
    use_cache: False re-runs the decoder on the whole prefix every step (the slow reference).
  Returns:
    (int32 `[batch, max_decode_length]` ids ending with EOS then padding,
     float32 `[batch]` sum of the chosen tokens' log-probabilities).
  """
  config = model.config
  memory, memory_bias = model.encode(source_ids)
  batch = tf.shape(source_ids)[0]
  length = decode_length(model, source_ids, max_decode_length, extra_decode_length)
  limits = example_limits(model, source_ids, max_decode_length, extra_decode_length)
  cache = model.init_cache(memory, length if padded_decode else None) if use_cache else {}
  # Decoder inputs: BOS followed by the tokens chosen so far.
  inputs = tf.fill([batch, length + 1], tf.constant(config.pad_id, tf.int32))
  inputs = _write_column(inputs, 0, tf.fill([batch], tf.constant(config.bos_id, tf.int32)))
  finished = tf.zeros([batch], tf.bool)
  log_probs = tf.zeros([batch], tf.float32)
  # The newest token is carried as its own loop variable rather than sliced out of `inputs` with
  # the loop counter: that slice reads stale values under XLA on TF 2.21 (see WORKSPACE_NOTES).
  last_tokens = inputs[:, :1]

  def next_logits(step, inputs, last_tokens, cache):
    if not use_cache:
      return model.decode(inputs[:, :step + 1], memory, memory_bias)[:, -1]
    return model.decode(last_tokens, memory, memory_bias, cache=cache,
                        decode_index=step if padded_decode else None)[:, -1]

  def body(step, inputs, last_tokens, finished, log_probs, cache):
    step_log_probs = tf.nn.log_softmax(next_logits(step, inputs, last_tokens, cache))
    tokens = tf.argmax(step_log_probs, axis=-1, output_type=tf.int32)
    tokens = tf.where(finished, config.pad_id, tokens)
    chosen = tf.gather(step_log_probs, tokens, batch_dims=1)
    log_probs += tf.where(finished, 0.0, chosen)
    inputs = _write_column(inputs, step + 1, tokens)
    finished |= tf.equal(tokens, config.eos_id) | (step + 1 >= limits)
    return step + 1, inputs, tokens[:, tf.newaxis], finished, log_probs, cache

  def cond(step, inputs, last_tokens, finished, log_probs, cache):
    return tf.logical_and(step < length, tf.logical_not(tf.reduce_all(finished)))

  loop_vars = (tf.constant(0), inputs, last_tokens, finished, log_probs, cache)
  _, inputs, _, _, log_probs, _ = tf.while_loop(
      cond, body, loop_vars,
      shape_invariants=_loop_shape_invariants(loop_vars, use_cache and not padded_decode))
  return inputs[:, 1:], log_probs


def length_penalty(length, alpha):
  """GNMT length penalty ((5 + length) / 6)^alpha (Wu et al., 2016), as used in the paper."""
  return tf.pow((5.0 + tf.cast(length, tf.float32)) / 6.0, alpha)


def _flatten_beams(x):
  """`[batch, beam, ...]` -> `[batch * beam, ...]`."""
  shape = tf.shape(x)
  return tf.reshape(x, tf.concat([[shape[0] * shape[1]], shape[2:]], axis=0))


def _tile_beams(x, beam_size):
  """`[batch, ...]` -> `[batch * beam, ...]`, each entry repeated beam_size times."""
  return _flatten_beams(tf.repeat(x[:, tf.newaxis], beam_size, axis=1))


def _gather_beams(x, beam_indices):
  """x `[batch, beam, ...]`, beam_indices `[batch, n]` -> `[batch, n, ...]`."""
  return tf.gather(x, beam_indices, batch_dims=1)


def beam_search(model, source_ids, beam_size=4, alpha=0.6, max_decode_length=None,
                extra_decode_length=50, padded_decode=False):
  """Beam search with length penalty (paper section 6.1: beam 4, alpha 0.6).

  Returns:
    ids: int32 `[batch, beam, max_decode_length]`: the beam_size best distinct hypotheses,
      best first, each ending with EOS (or cut at its example's length limit) then padding.
    scores: float32 `[batch, beam]`, log-probability / length_penalty, sorted descending.
    log_probs: float32 `[batch, beam]`, the sequences' summed token log-probabilities.
  """
  config = model.config
  memory, memory_bias = model.encode(source_ids)
  batch = tf.shape(source_ids)[0]
  length = decode_length(model, source_ids, max_decode_length, extra_decode_length)
  limits = example_limits(model, source_ids, max_decode_length, extra_decode_length)
  memory = _tile_beams(memory, beam_size)
  memory_bias = _tile_beams(memory_bias, beam_size)
  cache = model.init_cache(memory, length if padded_decode else None)

  pad = tf.constant(config.pad_id, tf.int32)
  alive_seq = tf.fill([batch, beam_size, length + 1], pad)
  alive_seq = _write_column(alive_seq, 0, tf.fill([batch, beam_size], config.bos_id))
  # All beams start identical: only beam 0 is live at first, so the first step picks k distinct.
  alive_log_probs = tf.tile([[0.0] + [_NEG_INF] * (beam_size - 1)], [batch, 1])
  alive_last = alive_seq[:, :, 0]  # carried, not sliced by step: see greedy_decode
  finished_seq = alive_seq
  finished_scores = tf.fill([batch, beam_size], _NEG_INF)
  finished_log_probs = tf.zeros([batch, beam_size])
  finished_flags = tf.zeros([batch, beam_size], tf.bool)

  def body(step, alive_seq, alive_last, alive_log_probs, finished_seq, finished_scores,
           finished_log_probs, finished_flags, cache):
    tokens = _flatten_beams(alive_last[:, :, tf.newaxis])
    logits = model.decode(tokens, memory, memory_bias, cache=cache,
                          decode_index=step if padded_decode else None)[:, -1]
    vocab = tf.shape(logits)[-1]
    candidate_log_probs = tf.reshape(tf.nn.log_softmax(logits), [batch, beam_size, vocab])
    candidate_log_probs += alive_log_probs[:, :, tf.newaxis]
    # 2k candidates: even if k of them end in EOS, k can stay alive.
    top_log_probs, top_indices = tf.math.top_k(
        tf.reshape(candidate_log_probs, [batch, beam_size * vocab]), k=2 * beam_size)
    top_beams = top_indices // vocab
    top_tokens = top_indices % vocab
    top_seq = _write_column(_gather_beams(alive_seq, top_beams), step + 1, top_tokens)
    # A hypothesis ends at EOS or when its example's length limit is reached.
    top_finished = tf.equal(top_tokens, config.eos_id) | (step + 1 >= limits)[:, tf.newaxis]

    # Alive: the k best candidates that did not just end.
    alive_candidates = top_log_probs + tf.cast(top_finished, tf.float32) * _NEG_INF
    alive_log_probs, keep = tf.math.top_k(alive_candidates, k=beam_size)
    alive_seq = _gather_beams(top_seq, keep)
    alive_last = _gather_beams(top_tokens, keep)
    source_beams = _gather_beams(top_beams, keep)
    flat_source = _flatten_beams(
        source_beams + tf.range(batch)[:, tf.newaxis] * beam_size)[:, tf.newaxis]
    for layer_cache in cache.values():
      for name in ("key", "value"):
        layer_cache[name] = tf.gather_nd(layer_cache[name], flat_source)

    # Finished: the k best of the old finished and the candidates that just ended. As in
    # fairseq, only an EOS ranked within the top k may finish, so beam size 1 is exactly greedy.
    within_beam = tf.range(2 * beam_size) < beam_size
    new_scores = tf.where(top_finished & within_beam[tf.newaxis],
                          top_log_probs / length_penalty(step + 1, alpha), _NEG_INF)
    all_scores = tf.concat([finished_scores, new_scores], axis=1)
    finished_scores, keep = tf.math.top_k(all_scores, k=beam_size)
    finished_seq = _gather_beams(tf.concat([finished_seq, top_seq], axis=1), keep)
    finished_log_probs = _gather_beams(
        tf.concat([finished_log_probs, top_log_probs], axis=1), keep)
    finished_flags = _gather_beams(
        tf.concat([finished_flags, top_finished & within_beam[tf.newaxis]], axis=1), keep)
    return (step + 1, alive_seq, alive_last, alive_log_probs, finished_seq, finished_scores,
            finished_log_probs, finished_flags, cache)

  def cond(step, alive_seq, alive_last, alive_log_probs, finished_seq, finished_scores,
           finished_log_probs, finished_flags, cache):
    # Stop when all beam_size finished slots are filled and no alive beam can still beat the
    # worst of them: log-probs only fall and the penalty is largest at the maximum length. An
    # unfilled slot counts as minus infinity, so the search goes on until it holds a real
    # hypothesis (every example's limit finishes its k best, so all slots fill by then).
    best_alive = alive_log_probs[:, 0] / length_penalty(length, alpha)
    worst_finished = tf.reduce_min(tf.where(finished_flags, finished_scores, _NEG_INF), axis=1)
    search_settled = tf.reduce_all(worst_finished > best_alive)
    return tf.logical_and(step < length, tf.logical_not(search_settled))

  loop_vars = (tf.constant(0), alive_seq, alive_last, alive_log_probs, finished_seq,
               finished_scores, finished_log_probs, finished_flags, cache)
  _, _, _, _, finished_seq, finished_scores, finished_log_probs, _, _ = tf.while_loop(
      cond, body, loop_vars,
      shape_invariants=_loop_shape_invariants(loop_vars, not padded_decode))
  # The loop ends with every finished slot filled (see cond): beam_size real hypotheses each.
  return finished_seq[:, :, 1:], finished_scores, finished_log_probs


def best_output(model, source_ids, beam_size=1, alpha=0.6, extra_decode_length=50,
                max_decode_length=None, padded_decode=False):
  """The single best output a row: greedy for beam_size 1 (exactly what beam 1 would give),
  else beam search's top beam. `padded_decode=True` is the layout for `jit_compile=True`.

  Returns (int32 ids `[batch, out_length]` ending in EOS then padding, float32 scores
  `[batch]`)."""
  if beam_size > 1:
    ids, scores, _ = beam_search(model, source_ids, beam_size, alpha,
                                 max_decode_length=max_decode_length,
                                 extra_decode_length=extra_decode_length,
                                 padded_decode=padded_decode)
    return ids[:, 0], scores[:, 0]
  return greedy_decode(model, source_ids, max_decode_length=max_decode_length,
                       extra_decode_length=extra_decode_length, padded_decode=padded_decode)
