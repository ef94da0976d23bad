"""Autoregressive decoding, for any model that says how its decoding starts: greedy, sampling and
beam search, driven by `tf.while_loop`.

The search never knows the model. A model supplies a `DecodingStart` (its
`start_decoding(inputs, options, beams=, padded=)`): a step function `(ids so far,
last tokens, step, cache) -> (logits, new cache)`, the initial cache, each row's first token and
each example's limit. The `Transformer` encodes its source there (and projects it once for every
step); a decoder-only language model prefills its prompt there. `token_loop(start, options,
choose)` (one token a row per step, picked by a choice function) and `beam_search(start,
options)` take that start and the `DecodeOptions` whole, as Model Garden's
`sequence_beam_search(symbols_to_logits_fn, initial_ids, initial_cache, ...)` and Flax's
`beam_search(inputs, cache, tokens_to_logits)` take theirs.

Entry points: `decode(model, inputs, options)` (one hypothesis a row, as `DecodeOptions` say:
greedy, beam or sample) and `nbest(model, inputs, options)` (every beam, best first), both
returning `Hypotheses`. For brevity in programs and tests, `greedy_decode`, `sample_decode` and
`beam_decode` take DecodeOptions' fields as keywords.

A new decoding option is a `DecodeOptions` field and the one function that uses it (e.g.
`sampling.draw` for a sampling cut, a model's `start_decoding` for a length rule, the search's
`_step_logits` for a rule on the next token given the ids so far, as `no_repeat_ngram_size`'s
`banned_by_ngrams`): nothing passes it along. `_step_logits` keeps the model's logits apart from
the search's: a rule changes what the search may choose, never the log-probabilities reported.

Every hypothesis has a `log_prob` (the sum of its tokens' log-probabilities under the model) and a
`score` (log_prob / length_penalty(length, alpha, form), what beam search ranks by), whatever the
strategy that found it; its length counts its tokens up to and including EOS.

Rules on the next token, each one `DecodeOptions` field: `no_repeat_ngram_size` and
`min_decode_length` rule tokens out of the search (the others keep the model's log-probs);
`never_generate` takes ids out of the model's distribution (the softmax runs over the rest);
`end_at_limit` forces END as a row's last allowed token (it adds 0 to the log-prob).

This module never looks inside the cache: it carries it, and beam search reorders it with
`tf.nest`, so any nest of `[batch * beam, ...]` tensors works. The `Transformer` has two layouts:
  * growing (`padded=False`): keys are appended; least work, graph mode.
  * padded (`padded=True`): a fixed `[.., max_decode_length, ..]` cache written slot by slot, so
    every shape is static and the loop compiles under `jit_compile=True`.
A model with an `attention_window` r decodes through a ring of r + 1 slots in both modes (static
shapes, memory flat in the output length); beams reorder it like any other cache.
Output buffers are always fixed-size `[batch, (beam,) length]`, padded with `pad_id`.

In graph mode (`DecodingStart.compact`) the searches drop finished examples from the working
batch as they go, as CTranslate2 does: once the examples still searching are `COMPACT_AT` of it
or fewer, the others' rows leave the cache, their `DecodingStart.memory` (a source's projected
keys and values) and limits, and what they found is scattered into full-size results. Under XLA
every shape is static, so every row runs until the batch is done.

Each search keeps its loop variables in one NamedTuple (`GreedyState`, `BeamState`) with a shape
per field; the loop body is a function from state to state.
"""

from typing import Any, Callable, NamedTuple, Optional, Tuple

import tensorflow as tf

from tfattn import sampling
from tfattn.decode_options import BEAM, GREEDY, SAMPLE, DecodeOptions

# A finite "minus infinity": products and differences with it stay finite (no NaN).
_NEG_INF = -1e9
# Every default below is DecodeOptions' (one value each: evaluation judges what is served).
_DEFAULTS = DecodeOptions()

# (ids so far int32 `[rows, length + 1]`, last tokens int32 `[rows]`, step, cache, memory) ->
# (float32 logits `[rows, vocab]`, new cache).
StepFn = Callable[[tf.Tensor, tf.Tensor, tf.Tensor, Any, Any], Tuple[tf.Tensor, Any]]
# When the examples still searching are this share of the working batch or less, the graph-mode
# searches drop the others (`DecodingStart.compact`): measured, WORKSPACE_NOTES issue 51 part 4.
COMPACT_AT = 0.75


class DecodingStart(NamedTuple):
  """How a model starts decoding a batch: everything a search needs and nothing about the model.

  Attributes:
    step_fn: (ids so far int32 `[rows, length + 1]`, last tokens int32 `[rows]`, step int32
      scalar, cache, memory) -> (float32 logits `[rows, vocab]`, the new cache); rows = batch *
      beams. `step` counts the tokens generated before `last tokens` (0: the first token); the
      ids hold the first token and the generated ones at 0..step, then padding (Model Garden's
      `symbols_to_logits_fn(ids, i, cache)`). A cached step reads `last tokens` alone. The
      number of rows may fall from step to step (`compact`): a step reads it from its inputs.
    cache: the initial cache, any nest of `[rows, ...]` tensors (`()` without one).
    first_tokens: int32 `[batch]`, the token each row's first step reads (the start token; a
      language model's last prompt token).
    limits: int32 `[batch]`, tokens each example may generate.
    length: int32 scalar (static under XLA), the output buffer size, >= every limit.
    max_steps: a Python int >= length: how many random numbers a sampler draws ahead (static).
    pad_id, eos_id: Python ints.
    cache_shapes: the cache's `tf.TensorShape`s as the loop may change them (a growing cache's
      lengthening axes relaxed), or None when every step keeps its shapes.
    memory: what the steps read per example and never change (a source's projected keys and
      values), any nest of `[batch, ...]` tensors, handed to `step_fn` (`()` without one).
    compact: the search may drop finished examples from its working batch (graph mode: shapes
      may change; not under XLA). Their rows leave the cache and their memory leaves `memory`;
      what they found is kept full-size. Results are the same (floats within rounding).
  """

  step_fn: StepFn
  cache: Any
  first_tokens: tf.Tensor
  limits: tf.Tensor
  length: Any
  max_steps: int
  pad_id: int
  eos_id: int
  cache_shapes: Any = None
  memory: Any = ()
  compact: bool = False


class Hypotheses(NamedTuple):
  """Decoded outputs, best first where there are several a row.

  Attributes:
    ids: int32 `[batch, length]` (`decode`, `greedy_decode`, `sample_decode`) or
      `[batch, beam, length]` (`nbest`, `beam_search`): tokens ending with EOS (or cut at the
      example's length limit), then padding.
    scores: float32 `[batch]` or `[batch, beam]`: log_probs / length_penalty(length, alpha).
    log_probs: float32 `[batch]` or `[batch, beam]`: the sum of the tokens' log-probabilities
      under the model (for a sample too: not under the temperature or the top-k/top-p cut).
  """

  ids: tf.Tensor
  scores: tf.Tensor
  log_probs: tf.Tensor


def length_penalty(length, alpha: float, form: str = "gnmt") -> tf.Tensor:
  """form="gnmt": ((5 + length) / 6)^alpha (Wu et al., 2016), as used in the paper;
  form="power": length^alpha (transformers' `length_penalty`: generated tokens, END included)."""
  length = tf.cast(length, tf.float32)
  if form == "power":
    return tf.pow(length, alpha)
  return tf.pow((5.0 + length) / 6.0, alpha)


def _penalty(length, options: DecodeOptions) -> tf.Tensor:
  return length_penalty(length, options.alpha, options.length_penalty)


def _write_column(buffer, index, values):
  """buffer `[..., length]`: sets column `index` to `values` `[...]`, static shapes (XLA-safe)."""
  column = tf.one_hot(index, tf.shape(buffer)[-1], on_value=True, off_value=False)
  return tf.where(column, values[..., tf.newaxis], buffer)


def _start_buffer(first_tokens, length, pad_id: int):
  """int32 `first_tokens.shape + [length + 1]`: the first tokens, then padding."""
  shape = tf.shape(first_tokens)
  buffer = tf.fill(tf.concat([shape, [length + 1]], 0), tf.constant(pad_id, tf.int32))
  return _write_column(buffer, 0, tf.cast(first_tokens, tf.int32))


def _shape_invariants(state, start: DecodingStart, compact: bool):
  """Every loop variable keeps its shape, except what the start says its cache may change and,
  when the search compacts, the working batch (every axis 0 but the step's)."""
  shapes = tf.nest.map_structure(lambda t: t.shape, state)
  if start.cache_shapes is not None:
    shapes = shapes._replace(cache=start.cache_shapes)
  if not compact:
    return shapes
  relaxed = tf.nest.map_structure(
    lambda shape: tf.TensorShape([None, *shape[1:]]) if shape.rank else shape, shapes
  )
  return relaxed._replace(step=shapes.step)


def banned_by_ngrams(ids: tf.Tensor, step: tf.Tensor, n: int, vocab) -> tf.Tensor:
  """bool `[rows, vocab]`: the tokens that would repeat an n-gram of `ids` (`no_repeat_ngram_size`).

  Args:
    ids: int32 `[rows, length]`, each row's tokens so far at positions 0..step (then padding).
    step: int32 scalar, the position of the newest token.
    n: the n-gram size (>= 1).
    vocab: the vocabulary size.
  """
  rows, length = tf.shape(ids)[0], ids.shape[1] or tf.shape(ids)[1]
  if isinstance(length, int) and length < n:
    return tf.zeros([rows, vocab], tf.bool)
  starts = tf.range(tf.shape(ids)[1] - n + 1)  # [positions]: where an earlier n-gram starts
  windows = tf.stack(
    [tf.gather(ids, starts + k, axis=1) for k in range(n)], axis=-1
  )  # [rows, positions, n]
  last = tf.gather(ids, tf.maximum(step - n + 2 + tf.range(n - 1), 0), axis=1)  # [rows, n - 1]
  repeats = tf.reduce_all(tf.equal(windows[:, :, : n - 1], last[:, tf.newaxis]), axis=-1)
  repeats &= (starts <= step - n + 1)[tf.newaxis] & (step >= n - 1)  # [rows, positions]
  row_index = tf.broadcast_to(tf.range(rows)[:, tf.newaxis], tf.shape(repeats))
  where = tf.stack([row_index, windows[:, :, n - 1]], axis=-1)  # [rows, positions, 2]
  hits = tf.scatter_nd(where, tf.cast(repeats, tf.int32), [rows, vocab])  # [rows, vocab]
  return hits > 0


def check_banned_ids(options: DecodeOptions, vocab_size: int) -> None:
  """A ValueError naming `never_generate` when an id lies outside the vocabulary."""
  outside = [i for i in options.banned_ids if i >= vocab_size]
  if outside:
    raise ValueError(
      f"never_generate holds ids {outside} outside the target vocabulary of {vocab_size}"
    )


def never_generated(ids, vocab) -> tf.Tensor:
  """bool `[vocab]`: True at each of `ids` (a tuple of Python ints)."""
  return tf.reduce_any(tf.one_hot(list(ids), vocab, on_value=True, off_value=False), axis=0)


def _step_logits(
  start: DecodingStart, ids, last_tokens, step, cache, memory, options: DecodeOptions
):
  """(the model's next-token logits, the search's logits, new cache), logits `[rows, vocab]`:
  a rule on the next token, reading `options` and the `ids` so far `[rows, length + 1]`, changes
  only the search's logits (a banned token gets a finite minus infinity): a new rule is one
  `if` here calling its function; every search follows. `never_generate` is the exception: its
  ids leave the model's own logits, so the softmax runs over the other ids."""
  logits, cache = start.step_fn(ids, last_tokens, step, cache, memory)
  vocab = tf.shape(logits)[-1]
  if options.banned_ids:
    logits = tf.where(never_generated(options.banned_ids, vocab)[tf.newaxis], _NEG_INF, logits)
  search_logits = logits
  if options.no_repeat_ngram_size:
    banned = banned_by_ngrams(ids, step, options.no_repeat_ngram_size, vocab)
    search_logits = tf.where(banned, _NEG_INF, search_logits)  # rules compose
  if options.min_decode_length:
    too_early = (step < options.min_decode_length) & tf.equal(tf.range(vocab), start.eos_id)
    search_logits = tf.where(too_early[tf.newaxis], _NEG_INF, search_logits)  # [rows, vocab]
  return logits, search_logits, cache


# --- Dropping finished examples (graph mode) --------------------------------------------------
# CTranslate2 drops finished sentences from its batch as it goes; so do the graph-mode searches
# (`DecodingStart.compact`). The working state holds the examples still searching, `index`
# says which example each is, and what the finished ones found is scattered into full-size
# results when they leave. The batch shrinks only once the examples still searching are
# `compact_at` of it or fewer: each drop gathers the cache and the memory once.


def _should_compact(done: tf.Tensor, compact_at: float) -> tf.Tensor:
  """bool scalar: some of the working examples are done, not all, and those left are at most
  `compact_at` of them. done: bool `[working]`."""
  working = tf.size(done)
  left = working - tf.reduce_sum(tf.cast(done, tf.int32))
  enough = tf.cast(left, tf.float32) <= compact_at * tf.cast(working, tf.float32)
  return (left > 0) & (left < working) & enough


def _rows(nest, rows):
  """Every tensor of `nest` `[n, ...]` at `rows` int32 `[m]` -> `[m, ...]`."""
  return tf.nest.map_structure(lambda x: tf.gather(x, rows), nest)


def _store(full, part, index):
  """`full` (a nest of `[batch, ...]`) with row `index[i]` set to `part`'s row i, for the
  working examples `index` int32 `[working]`."""
  where = index[:, tf.newaxis]  # [working, 1]
  return tf.nest.map_structure(lambda f, p: tf.tensor_scatter_nd_update(f, where, p), full, part)


def _still_searching(done: tf.Tensor) -> tf.Tensor:
  """int32 `[left]`: the positions of the working examples not `done` (bool `[working]`)."""
  return tf.cast(tf.where(tf.logical_not(done))[:, 0], tf.int32)


def _working(start: DecodingStart, index, compact: bool) -> DecodingStart:
  """`start` as the working examples `index` int32 `[working]` see it: their own limits."""
  return start._replace(limits=tf.gather(start.limits, index)) if compact else start


def _search_loop(state, found, step, going, done, drop, shapes, compact_at):
  """`state` after `step` (state -> state) while `going(state)` (a bool scalar); with `found`
  (the full-size results; None: no compaction), in phases: steps until the search ends or the
  examples `done(state)` (bool `[working]`) leave few enough searching (`_should_compact`),
  then `drop(state, found)` -> (state without them, found with what they found). Phases, not a
  `tf.cond` in every step: a step keeps its ops. Returns (state, found)."""
  if found is None:
    (state,) = tf.while_loop(going, lambda s: (step(s),), (state,), shape_invariants=(shapes,))
    return state, None

  def phase(state, found):
    (state,) = tf.while_loop(
      lambda s: tf.logical_and(going(s), tf.logical_not(_should_compact(done(s), compact_at))),
      lambda s: (step(s),),
      (state,),
      shape_invariants=(shapes,),
    )
    return drop(state, found)

  found_shapes = tf.nest.map_structure(lambda t: t.shape, found)
  return tf.while_loop(
    lambda s, f: going(s), phase, (state, found), shape_invariants=(shapes, found_shapes)
  )


# --- One token a row per step: greedy and sampling -------------------------------------------


class GreedyState(NamedTuple):
  """Loop variables of `token_loop` (greedy and sampling).

  Attributes:
    step: int32 scalar, tokens generated so far; `last_tokens` sit at position `step`.
    ids: int32 `[batch, length + 1]`, the start token, the tokens chosen so far, then padding.
    last_tokens: int32 `[batch]`, the newest token. Carried as its own loop variable rather
      than sliced out of `ids` by `step`: that slice reads stale values under XLA on TF 2.21
      (see WORKSPACE_NOTES).
    finished: bool `[batch]`, the row has said EOS or reached its length limit.
    log_probs: float32 `[batch]`, sum of the chosen tokens' log-probabilities.
    cache: the model's decoding cache (any nest of `[batch, ...]` tensors); `()` without one.
    memory: the start's `memory` of these rows.
    index: int32 `[batch]`, the example each row is (`0..batch - 1` until finished rows leave:
      then `batch` is the working batch).
  """

  step: tf.Tensor
  ids: tf.Tensor
  last_tokens: tf.Tensor
  finished: tf.Tensor
  log_probs: tf.Tensor
  cache: Any
  memory: Any
  index: tf.Tensor


class _Found(NamedTuple):
  """What `token_loop` found, full-size: ids int32 `[batch, length + 1]`, log_probs float32
  `[batch]` (a row's are written when it leaves the working batch)."""

  ids: tf.Tensor
  log_probs: tf.Tensor


# (float32 logits `[batch, vocab]`, the GreedyState before the step) -> int32 tokens `[batch]`.
ChooseFn = Callable[[tf.Tensor, GreedyState], tf.Tensor]


def argmax_choice(logits: tf.Tensor, state: GreedyState) -> tf.Tensor:
  """Greedy: each row's most likely token."""
  del state  # the same rule at every step
  return tf.argmax(logits, axis=-1, output_type=tf.int32)


def _token_step(
  state: GreedyState, start: DecodingStart, choose: ChooseFn, options: DecodeOptions
) -> GreedyState:
  """Appends the token `choose` picks to every unfinished row."""
  logits, search_logits, cache = _step_logits(
    start, state.ids, state.last_tokens, state.step, state.cache, state.memory, options
  )
  tokens = choose(search_logits, state)  # [batch]
  chosen = tf.gather(tf.nn.log_softmax(logits), tokens, batch_dims=1)  # [batch]: the model's
  if options.end_at_limit:  # a row's last allowed token is END, at no cost
    last = state.step + 1 >= start.limits  # [batch]
    tokens = tf.where(last, start.eos_id, tokens)
    chosen = tf.where(last, 0.0, chosen)
  tokens = tf.where(state.finished, start.pad_id, tokens)
  finished = (
    state.finished | tf.equal(tokens, start.eos_id) | (state.step + 1 >= start.limits)
  )  # [batch]
  return GreedyState(
    step=state.step + 1,
    ids=_write_column(state.ids, state.step + 1, tokens),
    last_tokens=tokens,
    finished=finished,
    log_probs=state.log_probs + tf.where(state.finished, 0.0, chosen),
    cache=cache,
    memory=state.memory,
    index=state.index,
  )


def _compact_rows(state: GreedyState, found: _Found) -> Tuple[GreedyState, _Found]:
  """Finished rows leave the working batch; what every row found so far is stored."""
  with tf.name_scope("compact"):
    return _compacted_rows(state, found)


def _compacted_rows(state: GreedyState, found: _Found) -> Tuple[GreedyState, _Found]:
  found = _store(found, _Found(state.ids, state.log_probs), state.index)
  keep = _still_searching(state.finished)  # [left]
  return state._replace(
    ids=tf.gather(state.ids, keep),
    last_tokens=tf.gather(state.last_tokens, keep),
    finished=tf.gather(state.finished, keep),
    log_probs=tf.gather(state.log_probs, keep),
    cache=_rows(state.cache, keep),
    memory=_rows(state.memory, keep),
    index=tf.gather(state.index, keep),
  ), found


def _output_lengths(ids, limits, eos_id: int) -> tf.Tensor:
  """int32 `[batch]`: tokens up to and including the first EOS, else the example's limit."""
  positions = tf.range(1, tf.shape(ids)[-1] + 1)[tf.newaxis]  # [1, length]: 1-based
  # (tf.argmax does not promise the first of tied maxima: a masked minimum does.)
  first_eos = tf.reduce_min(tf.where(tf.equal(ids, eos_id), positions, tf.int32.max), -1)
  return tf.minimum(first_eos, limits)


def token_loop(
  start: DecodingStart,
  options: DecodeOptions,
  choose: ChooseFn = argmax_choice,
  *,
  compact_at: Optional[float] = COMPACT_AT,
) -> Hypotheses:
  """One hypothesis a row, one token a step, picked by `choose` until EOS or the row's limit.

  Args:
    start: the model's `DecodingStart` for one row per example (`beams=1`).
    options: the decoding options (here: the length penalty, for the scores, and the rules
      on the next token).
    choose: (logits float32 `[batch, vocab]`, GreedyState) -> int32 `[batch]`, e.g.
      `argmax_choice` or `sampling.sampling_choice(...)`; a row's example is `state.index`.
    compact_at: with `start.compact`, finished rows leave the working batch once the rows still
      going are this share of it or fewer (None: never).
  Returns:
    `Hypotheses` with ids `[batch, start.length]`, scores and log_probs `[batch]`.
  """
  compact = start.compact and compact_at is not None
  ids = _start_buffer(start.first_tokens, start.length, start.pad_id)  # [batch, length + 1]
  batch = tf.shape(ids)[0]
  state = GreedyState(
    step=tf.constant(0),
    ids=ids,
    last_tokens=ids[:, 0],
    finished=tf.zeros([batch], tf.bool),
    log_probs=tf.zeros([batch]),
    cache=start.cache,
    memory=start.memory,
    index=tf.range(batch),
  )
  state, found = _search_loop(
    state,
    _Found(ids, state.log_probs) if compact else None,  # full-size, when rows leave
    lambda state: _token_step(state, _working(start, state.index, compact), choose, options),
    lambda state: tf.logical_and(
      state.step < start.length, tf.logical_not(tf.reduce_all(state.finished))
    ),
    lambda state: state.finished,
    _compact_rows,
    _shape_invariants(state, start, compact),
    compact_at,
  )
  if compact:
    state = _store(found, _Found(state.ids, state.log_probs), state.index)
  ids = state.ids[:, 1:]  # [batch, length]
  lengths = _output_lengths(ids, start.limits, start.eos_id)  # [batch]
  penalty = _penalty(lengths, options)  # [batch]
  return Hypotheses(ids=ids, scores=state.log_probs / penalty, log_probs=state.log_probs)


def sample_loop(
  start: DecodingStart,
  options: DecodeOptions,
  seeds: Optional[tf.Tensor] = None,
  *,
  compact_at: Optional[float] = COMPACT_AT,
) -> Hypotheses:
  """`token_loop` drawing every token as `options` say (temperature, top-k, top-p; see
  `sampling.draw`) with one seed a row: a row's output depends only on its seed and its input.

  Args:
    seeds: int32 or int64 `[batch]`; None: options.seed + the row's index.
    compact_at: as `token_loop`'s.
  """
  if seeds is None:
    seeds = sampling.row_seeds(tf.shape(start.first_tokens)[0], options.seed)
  choose = sampling.sampling_choice(seeds, start.max_steps, options)
  return token_loop(start, options, choose, compact_at=compact_at)


# --- Beam search ----------------------------------------------------------------------------


def _flatten_beams(x):
  """`[batch, beam, ...]` -> `[batch * beam, ...]`."""
  shape = tf.shape(x)
  return tf.reshape(x, tf.concat([[shape[0] * shape[1]], shape[2:]], axis=0))


def tile_beams(x, beam_size: int):
  """`[batch, ...]` -> `[batch * beam, ...]`, each entry repeated beam_size times."""
  return _flatten_beams(tf.repeat(x[:, tf.newaxis], beam_size, axis=1))


def _gather_beams(nest, beam_indices):
  """Every tensor of `nest` `[batch, beam, ...]`, beam_indices `[batch, n]` -> `[batch, n, ...]`."""
  return tf.nest.map_structure(lambda x: tf.gather(x, beam_indices, batch_dims=1), nest)


def reorder_beams(cache, beam_indices: tf.Tensor, beam_size: int):
  """Reorders a cache of flattened beams: row `b * beam_size + j` of the result is row
  `b * beam_size + beam_indices[b, j]` of the input.

  Args:
    cache: any nest (dicts, tuples, NamedTuples) of tensors `[batch * beam_size, ...]`.
    beam_indices: int32 `[batch, beam_size]`, the beam each new beam continues.
    beam_size: beams per example.
  Returns:
    A nest of the same structure and shapes.
  """
  with tf.name_scope("reorder_beams"):  # named for profiles (benchmarks/search_profile.py)
    batch = tf.shape(beam_indices)[0]
    rows = _flatten_beams(beam_indices + tf.range(batch)[:, tf.newaxis] * beam_size)  # [b * k]
    return tf.nest.map_structure(lambda x: tf.gather(x, rows), cache)


class AliveBeams(NamedTuple):
  """The beam_size best hypotheses that have not ended.

  Attributes:
    ids: int32 `[batch, beam, length + 1]`, the start token, the tokens so far, then padding.
    last_tokens: int32 `[batch, beam]`, the newest token (carried, not sliced: see GreedyState).
    log_probs: float32 `[batch, beam]`, summed token log-probabilities, best first.
  """

  ids: tf.Tensor
  last_tokens: tf.Tensor
  log_probs: tf.Tensor


class FinishedBeams(NamedTuple):
  """The beam_size best hypotheses that have ended (EOS or the example's length limit).

  Attributes:
    ids: int32 `[batch, beam, length + 1]`.
    scores: float32 `[batch, beam]`, log_probs / length_penalty, best first; -1e9 when empty.
    log_probs: float32 `[batch, beam]`, summed token log-probabilities.
    flags: bool `[batch, beam]`, the slot holds a real hypothesis.
  """

  ids: tf.Tensor
  scores: tf.Tensor
  log_probs: tf.Tensor
  flags: tf.Tensor


class BeamState(NamedTuple):
  """Loop variables of `beam_search`.

  Attributes:
    step: int32 scalar, tokens generated so far; `alive.last_tokens` sit at position `step`.
    alive: `AliveBeams`, the hypotheses still growing.
    finished: `FinishedBeams`, the best ended hypotheses so far.
    settled: bool `[batch]`, the example's search is over (`_settled`): with beam_stop
      "current" it takes no more finished hypotheses.
    cache: the model's decoding cache for the alive beams, any nest of `[batch * beam, ...]`.
    memory: the start's `memory` of these examples.
    index: int32 `[batch]`, the example each is (`0..batch - 1` until settled examples leave:
      then `batch` is the working batch).
  """

  step: tf.Tensor
  alive: AliveBeams
  finished: FinishedBeams
  settled: tf.Tensor
  cache: Any
  memory: Any
  index: tf.Tensor


class _Candidates(NamedTuple):
  """The 2 * beam_size best one-token extensions of the alive beams, best first.

  Attributes:
    ids: int32 `[batch, 2k, length + 1]`, the extended sequences.
    tokens: int32 `[batch, 2k]`, the token each adds.
    log_probs: float32 `[batch, 2k]`, summed token log-probabilities.
    beams: int32 `[batch, 2k]`, the alive beam each extends.
    ended: bool `[batch, 2k]`, the token is EOS or reaches the example's length limit.
  """

  ids: tf.Tensor
  tokens: tf.Tensor
  log_probs: tf.Tensor
  beams: tf.Tensor
  ended: tf.Tensor


def _initial_beam_state(start: DecodingStart, beam_size: int) -> BeamState:
  first = tf.repeat(start.first_tokens[:, tf.newaxis], beam_size, axis=1)  # [batch, beam]
  ids = _start_buffer(first, start.length, start.pad_id)  # [batch, beam, length + 1]
  batch = tf.shape(ids)[0]
  # All beams start identical: only beam 0 is live at first, so the first step picks k distinct.
  alive_log_probs = tf.tile([[0.0] + [_NEG_INF] * (beam_size - 1)], [batch, 1])  # [batch, beam]
  alive = AliveBeams(ids=ids, last_tokens=ids[:, :, 0], log_probs=alive_log_probs)
  finished = FinishedBeams(
    ids=ids,
    scores=tf.fill([batch, beam_size], _NEG_INF),
    log_probs=tf.zeros([batch, beam_size]),
    flags=tf.zeros([batch, beam_size], tf.bool),
  )
  return BeamState(
    step=tf.constant(0),
    alive=alive,
    finished=finished,
    settled=tf.zeros([batch], tf.bool),
    cache=start.cache,
    memory=start.memory,
    index=tf.range(batch),
  )


def _grow_alive(
  state: BeamState, start: DecodingStart, options: DecodeOptions
) -> Tuple[_Candidates, Any]:
  """Scores every one-token extension of the alive beams and keeps the 2k best: even if k of
  them end, k can stay alive. Also returns the new cache (rows still in the old beam order)."""
  beam_size = options.beam_size
  batch = tf.shape(state.alive.log_probs)[0]
  logits, search_logits, cache = _step_logits(
    start,
    _flatten_beams(state.alive.ids),
    tf.reshape(state.alive.last_tokens, [-1]),
    state.step,
    state.cache,
    state.memory,
    options,
  )  # logits: [batch * beam, vocab]
  vocab = tf.shape(logits)[-1]
  log_probs = tf.reshape(tf.nn.log_softmax(logits), [batch, beam_size, vocab])
  if search_logits is not logits:  # a rule ruled tokens out: never candidates; the rest keep
    ruled_out = tf.reshape(search_logits <= _NEG_INF, [batch, beam_size, vocab])  # the model's
    log_probs = tf.where(ruled_out, _NEG_INF, log_probs)
  if options.end_at_limit:  # at an example's last allowed token only END, at no cost
    last = (state.step + 1 >= start.limits)[:, tf.newaxis, tf.newaxis]  # [batch, 1, 1]
    forced = tf.where(tf.equal(tf.range(vocab), start.eos_id), 0.0, _NEG_INF)  # [vocab]
    log_probs = tf.where(last, forced, log_probs)
  log_probs += state.alive.log_probs[:, :, tf.newaxis]  # sequence log-probs [batch, beam, vocab]
  top_log_probs, top_indices = tf.math.top_k(
    tf.reshape(log_probs, [batch, beam_size * vocab]), k=2 * beam_size
  )  # [batch, 2k]
  beams, tokens = top_indices // vocab, top_indices % vocab  # [batch, 2k]
  ids = _write_column(
    _gather_beams(state.alive.ids, beams), state.step + 1, tokens
  )  # [batch, 2k, length + 1]
  ended = (
    tf.equal(tokens, start.eos_id) | (state.step + 1 >= start.limits)[:, tf.newaxis]
  )  # [batch, 2k]
  return _Candidates(ids, tokens, top_log_probs, beams, ended), cache


def _select_alive(candidates: _Candidates, cache, beam_size: int) -> Tuple[AliveBeams, Any]:
  """The k best candidates that did not just end, and the cache reordered to follow them."""
  still_alive = candidates.log_probs + tf.cast(candidates.ended, tf.float32) * _NEG_INF
  log_probs, keep = tf.math.top_k(still_alive, k=beam_size)  # [batch, beam]
  ids, tokens, beams = _gather_beams((candidates.ids, candidates.tokens, candidates.beams), keep)
  return AliveBeams(ids, tokens, log_probs), reorder_beams(cache, beams, beam_size)


def _update_finished(
  finished: FinishedBeams,
  candidates: _Candidates,
  length,
  options: DecodeOptions,
  settled: tf.Tensor,
) -> FinishedBeams:
  """The k best of the finished hypotheses and the candidates that just ended at `length`
  tokens. As in fairseq, only an EOS ranked within the top k may finish, so beam size 1 is
  exactly greedy. With beam_stop "current", a `settled` example `[batch]` takes none."""
  beam_size = options.beam_size
  within_beam = tf.range(2 * beam_size) < beam_size  # [2k]
  newly_finished = candidates.ended & within_beam[tf.newaxis]  # [batch, 2k]
  if options.beam_stop == "current":
    newly_finished &= tf.logical_not(settled)[:, tf.newaxis]
  scores = tf.where(newly_finished, candidates.log_probs / _penalty(length, options), _NEG_INF)
  new = FinishedBeams(candidates.ids, scores, candidates.log_probs, newly_finished)
  pool = tf.nest.map_structure(
    lambda old, new: tf.concat([old, new], axis=1), finished, new
  )  # each [batch, 3k, ...]
  _, keep = tf.math.top_k(pool.scores, k=beam_size)  # [batch, beam]
  return _gather_beams(pool, keep)


def _beam_search_step(state: BeamState, start: DecodingStart, options: DecodeOptions) -> BeamState:
  candidates, cache = _grow_alive(state, start, options)
  alive, cache = _select_alive(candidates, cache, options.beam_size)
  step = state.step + 1
  finished = _update_finished(state.finished, candidates, step, options, state.settled)
  settled = state.settled | _settled(alive, finished, step, start.length, options)  # [batch]
  return BeamState(step, alive, finished, settled, cache, state.memory, state.index)


def _compact_beams(
  state: BeamState, found: FinishedBeams, beam_size: int
) -> Tuple[BeamState, FinishedBeams]:
  """Settled examples leave the working batch (their beams leave the cache); what every
  example has finished so far is stored."""
  with tf.name_scope("compact"):
    return _compacted_beams(state, found, beam_size)


def _compacted_beams(
  state: BeamState, found: FinishedBeams, beam_size: int
) -> Tuple[BeamState, FinishedBeams]:
  found = _store(found, state.finished, state.index)
  keep = _still_searching(state.settled)  # [left]
  rows = _flatten_beams(keep[:, tf.newaxis] * beam_size + tf.range(beam_size))  # [left * beam]
  return BeamState(
    step=state.step,
    alive=_rows(state.alive, keep),
    finished=_rows(state.finished, keep),
    settled=tf.gather(state.settled, keep),
    cache=_rows(state.cache, rows),
    memory=_rows(state.memory, keep),
    index=tf.gather(state.index, keep),
  ), found


def _settled(alive: AliveBeams, finished: FinishedBeams, step, length, options) -> tf.Tensor:
  """bool `[batch]`: all beam_size finished slots are filled and no alive beam can beat the
  worst of them. beam_stop "bound": not even at the maximum `length` (log-probs only fall and
  the penalty is largest there: exact); "current": at its current length `step` (transformers'
  early_stopping=False heuristic). An unfilled slot counts as minus infinity, so the search
  goes on until it holds a real hypothesis (every example's limit finishes its k best, so all
  slots fill by then)."""
  if options.beam_stop == "current":
    best_alive = alive.log_probs[:, 0] / _penalty(step, options)  # [batch]
  else:
    best_alive = alive.log_probs[:, 0] / _penalty(length, options)  # [batch]
  worst_finished = tf.reduce_min(
    tf.where(finished.flags, finished.scores, _NEG_INF), axis=1
  )  # [batch]
  if options.beam_stop == "current":
    return worst_finished >= best_alive
  return worst_finished > best_alive


def _search_continues(state: BeamState, length) -> tf.Tensor:
  """Until every example has settled (`_settled`) or the buffer is full."""
  return tf.logical_and(state.step < length, tf.logical_not(tf.reduce_all(state.settled)))


def beam_search(
  start: DecodingStart, options: DecodeOptions, *, compact_at: Optional[float] = COMPACT_AT
) -> Hypotheses:
  """Beam search of `options.beam_size` with length penalty `options.alpha` (paper section
  6.1: beam 4, alpha 0.6).

  Args:
    start: the model's `DecodingStart` for `options.beam_size` rows per example.
    options: the decoding options.
    compact_at: with `start.compact`, settled examples leave the working batch once those
      still searching are this share of it or fewer (None: never).
  Returns:
    `Hypotheses`: ids int32 `[batch, beam, start.length]`, the beam_size best distinct
    hypotheses, best first, each ending with EOS (or cut at its example's length limit) then
    padding; scores float32 `[batch, beam]` (log_probs / length_penalty, descending); log_probs
    float32 `[batch, beam]`.
  """
  # A settled example's finished beams never change again, so it may leave: with beam_stop
  # "current" it takes none; with "bound" none can beat them (alpha >= 0: DecodeOptions checks).
  compact = start.compact and compact_at is not None
  state = _initial_beam_state(start, options.beam_size)
  state, found = _search_loop(
    state,
    state.finished if compact else None,  # full-size, when examples leave
    lambda state: _beam_search_step(state, _working(start, state.index, compact), options),
    lambda state: _search_continues(state, start.length),
    lambda state: state.settled,
    lambda state, found: _compact_beams(state, found, options.beam_size),
    _shape_invariants(state, start, compact),
    compact_at,
  )
  # The loop ends with every finished slot filled (see _search_continues).
  finished = _store(found, state.finished, state.index) if compact else state.finished
  return Hypotheses(
    ids=finished.ids[:, :, 1:],
    scores=finished.scores,
    log_probs=finished.log_probs,
  )


# --- Entry points ---------------------------------------------------------------------------


def within(start: DecodingStart, max_new_tokens: Optional[tf.Tensor]) -> DecodingStart:
  """`start` with each example's limit cut to `max_new_tokens` (int `[batch]`, a row's own
  request; None: as it is). The buffer stays the start's: a caller wanting more tokens than the
  options' length asks with a larger one (e.g. max_decode_length = the model's limit)."""
  if max_new_tokens is None:
    return start
  cut = tf.minimum(start.limits, tf.cast(max_new_tokens, start.limits.dtype))  # [batch]
  return start._replace(limits=cut)


def decode(
  model,
  inputs: tf.Tensor,
  options: DecodeOptions = _DEFAULTS,
  *,
  seeds: Optional[tf.Tensor] = None,
  padded_decode: bool = False,
  max_new_tokens: Optional[tf.Tensor] = None,
) -> Hypotheses:
  """One hypothesis a row, found as `options` say: greedy, beam search's best beam (beam size 1
  runs the greedy loop: the same result, tested), or a sample.

  Args:
    model: a model with `start_decoding` (a `tfattn.Transformer`, a `tfattn.LanguageModel`).
    inputs: int32 `[batch, length]`, what the model decodes from (a source, a prompt).
    options: the strategy and its settings.
    seeds: sampling only (ignored otherwise): int `[batch]`, one seed per row; None:
      options.seed + the row's index.
    padded_decode: the fixed-size cache that compiles under `jit_compile=True`.
    max_new_tokens: None, or int `[batch]`: tokens each row may generate at most, within the
      limits the options and the model set (`within`).
  Returns:
    `Hypotheses` with ids int32 `[batch, length]`, scores and log_probs float32 `[batch]`.
  """
  if options.strategy == BEAM and options.beam_size > 1:
    found = nbest(
      model, inputs, options, padded_decode=padded_decode, max_new_tokens=max_new_tokens
    )
    return first_beam(found)
  start = within(model.start_decoding(inputs, options, padded=padded_decode), max_new_tokens)
  if options.strategy == SAMPLE:
    return sample_loop(start, options, seeds)
  return token_loop(start, options)


def nbest(
  model,
  inputs: tf.Tensor,
  options: DecodeOptions = _DEFAULTS,
  *,
  padded_decode: bool = False,
  max_new_tokens: Optional[tf.Tensor] = None,
) -> Hypotheses:
  """Every beam of a beam search of `options.beam_size` (whatever `options.strategy` is), best
  first: ids int32 `[batch, beam, length]`, scores and log_probs float32 `[batch, beam]`;
  `max_new_tokens` as `decode`'s."""
  start = model.start_decoding(inputs, options, beams=options.beam_size, padded=padded_decode)
  return beam_search(within(start, max_new_tokens), options)


def greedy_decode(model, inputs: tf.Tensor, *, padded_decode: bool = False, **fields) -> Hypotheses:
  """Greedy `decode` with DecodeOptions' `fields` as keywords (alpha, max_decode_length, ...)."""
  options = DecodeOptions(strategy=GREEDY, **fields)
  return decode(model, inputs, options, padded_decode=padded_decode)


def sample_decode(
  model,
  inputs: tf.Tensor,
  *,
  seeds: Optional[tf.Tensor] = None,
  padded_decode: bool = False,
  **fields,
) -> Hypotheses:
  """Sampling `decode` with DecodeOptions' `fields` as keywords (temperature, top_k, top_p,
  ...): every token drawn from the model's distribution, sharpened by the temperature and cut
  to the top k, then to the top-p nucleus (see `sampling.draw`). seeds: int `[batch]`, one a
  row (a row's output depends only on its seed and its input); None: options.seed + the row's
  index."""
  options = DecodeOptions(strategy=SAMPLE, **fields)
  return decode(model, inputs, options, seeds=seeds, padded_decode=padded_decode)


def beam_decode(model, inputs: tf.Tensor, *, padded_decode: bool = False, **fields) -> Hypotheses:
  """Every beam (`nbest`) with DecodeOptions' `fields` as keywords (beam_size, alpha, ...):
  ids int32 `[batch, beam, length]`, scores and log_probs float32 `[batch, beam]`."""
  return nbest(model, inputs, DecodeOptions(strategy=BEAM, **fields), padded_decode=padded_decode)


def first_beam(hypotheses: Hypotheses) -> Hypotheses:
  """`[batch, beam, ...]` hypotheses -> the best one a row, `[batch, ...]`."""
  return Hypotheses(*(field[:, 0] for field in hypotheses))


def source_seeds(source_ids: tf.Tensor, options: DecodeOptions, pad_id: int) -> Optional[tf.Tensor]:
  """The per-row seeds an export's serving_default and the evaluation sample with: options.seed
  mixed with a fingerprint of each row's tokens (`sampling.source_seeds`), so a source gets the
  same sample whatever its batch-mates and its place in the batch (server-side batching merges
  requests). None unless `options.strategy` is sample. Graph mode only (string ops)."""
  if options.strategy != SAMPLE:
    return None
  return sampling.source_seeds(source_ids, options.seed, pad_id)
