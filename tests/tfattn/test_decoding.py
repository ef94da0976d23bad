"""Greedy, beam search and sampling: cache correctness, XLA, beam invariants, batch independence,
DecodeOptions, n-best, seeds."""

import collections

import numpy as np
import pytest
import tensorflow as tf

import tfattn
from tfattn import decoding
from tfattn.decode_options import DecodeOptions
from tfattn.support.reference_decoding import reference_decode

from conftest import random_ids
from train_helpers import assert_same_answers_but_a_near_tie

VOCAB = 24


def _model(seed, eos_boost=2.5, max_length=64):
  """A random model that sometimes says EOS and never says padding, so outputs end clearly."""
  config = tfattn.TransformerConfig.preset(
    "tiny",
    source_vocab_size=VOCAB,
    target_vocab_size=VOCAB,
    tie_output_embedding=False,
    seed=seed,
    max_length=max_length,
  )
  model = tfattn.Transformer(config)
  bias = np.zeros([VOCAB], np.float32)
  bias[config.pad_id], bias[config.bos_id], bias[config.eos_id] = -30.0, -30.0, eos_boost
  model.output_projection.bias.assign(bias)
  return model


def _lengths(ids, eos_id=2):
  """Tokens up to and including the first EOS (all of them if none)."""
  ids = np.asarray(ids)
  is_eos = ids == eos_id
  return np.where(is_eos.any(-1), is_eos.argmax(-1) + 1, ids.shape[-1])


def _recomputed_log_probs(model, source, ids):
  """Teacher-forced sum of log p(token) over each sequence, up to its EOS."""
  bos = tf.fill([tf.shape(ids)[0], 1], model.config.start_id)
  log_probs = tf.nn.log_softmax(model(source, tf.concat([bos, ids[:, :-1]], 1)))
  token_log_probs = tf.gather(log_probs, ids, batch_dims=2).numpy()
  mask = np.arange(ids.shape[1])[None] < _lengths(ids)[:, None]
  return (token_log_probs * mask).sum(-1)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cached_greedy_equals_uncached_greedy(seed):
  model = _model(seed)
  source = random_ids(3, 7, VOCAB, seed)
  cached = tf.function(
    lambda s: decoding.greedy_decode(model, s, max_decode_length=12), autograph=False
  )
  uncached = tf.function(
    lambda s: reference_decode(model, s, DecodeOptions(strategy="greedy", max_decode_length=12)),
    autograph=False,
  )
  cached_ids, _, cached_scores = cached(source)  # the "scores" compared are the log-probs
  uncached_ids, _, uncached_scores = uncached(source)
  np.testing.assert_array_equal(cached_ids, uncached_ids)
  np.testing.assert_allclose(cached_scores, uncached_scores, atol=1e-4)
  np.testing.assert_allclose(
    cached_scores, _recomputed_log_probs(model, source, cached_ids), atol=1e-4
  )


def test_greedy_stops_at_eos_and_pads_after():
  model = _model(0, eos_boost=4.0)
  ids = decoding.greedy_decode(model, random_ids(4, 5, VOCAB, 3), max_decode_length=15).ids
  ids = ids.numpy()
  lengths = _lengths(ids)
  assert (lengths < 15).any(), "test model should emit EOS for some inputs"
  for row, length in zip(ids, lengths):
    assert (row[length:] == 0).all()


@pytest.mark.slow
@pytest.mark.parametrize("padded_decode", [False, True])
def test_padded_xla_decoding_matches_graph_decoding(padded_decode):
  model = _model(4)
  source = random_ids(2, 6, VOCAB, 4)
  reference = decoding.greedy_decode(model, source, max_decode_length=10)
  spec = tf.TensorSpec([None, None], tf.int32)
  greedy = tf.function(
    lambda s: decoding.greedy_decode(model, s, max_decode_length=10, padded_decode=padded_decode),
    input_signature=[spec],
    jit_compile=padded_decode,
    autograph=False,
  )
  beam = tf.function(
    lambda s: decoding.beam_decode(
      model, s, beam_size=3, max_decode_length=10, padded_decode=padded_decode
    ),
    input_signature=[spec],
    jit_compile=padded_decode,
    autograph=False,
  )
  for result, expected in zip(greedy(source), reference):
    np.testing.assert_allclose(result, expected, atol=1e-4)
  beam_reference = decoding.beam_decode(model, source, beam_size=3, max_decode_length=10)
  for result, expected in zip(beam(source), beam_reference):
    np.testing.assert_allclose(result, expected, atol=1e-4)
  # A new batch size and source length reuse the same trace.
  greedy(random_ids(5, 9, VOCAB, 5))
  beam(random_ids(5, 9, VOCAB, 5))
  assert greedy.experimental_get_tracing_count() == 1
  assert beam.experimental_get_tracing_count() == 1


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_beam_size_one_equals_greedy(seed):
  model = _model(seed)
  source = random_ids(3, 6, VOCAB, seed + 10)
  greedy_ids, _, greedy_log_probs = decoding.greedy_decode(model, source, max_decode_length=12)
  beam_ids, _, beam_log_probs = decoding.beam_decode(
    model, source, beam_size=1, alpha=0.0, max_decode_length=12
  )
  np.testing.assert_array_equal(beam_ids[:, 0], greedy_ids)
  np.testing.assert_allclose(beam_log_probs[:, 0], greedy_log_probs, atol=1e-4)


@pytest.mark.parametrize("seed", [0, 1])
def test_beams_are_sorted_and_scores_are_recomputed_log_probs(seed):
  model = _model(seed)
  source = random_ids(2, 6, VOCAB, seed + 20)
  beam, alpha = 4, 0.6
  ids, scores, log_probs = decoding.beam_decode(
    model, source, beam_size=beam, alpha=alpha, max_decode_length=12
  )
  assert ids.shape == (2, beam, 12)
  scores = scores.numpy()
  assert (np.diff(scores, axis=1) <= 1e-6).all(), scores
  flat_ids = tf.reshape(ids, [2 * beam, 12])
  flat_source = tf.repeat(source, beam, axis=0)
  recomputed = _recomputed_log_probs(model, flat_source, flat_ids).reshape(2, beam)
  np.testing.assert_allclose(log_probs, recomputed, atol=1e-4)
  penalty = ((5.0 + _lengths(flat_ids).reshape(2, beam)) / 6.0) ** alpha
  np.testing.assert_allclose(scores, recomputed / penalty, atol=1e-4)


def test_batch_entries_are_independent():
  model = _model(6)
  short = tf.constant([[5, 6, 7, 8, 0, 0, 0]])
  other = random_ids(1, 7, VOCAB, 6)
  long = tf.constant([[9, 10, 11, 12, 13, 14, 15]])
  alone = decoding.beam_decode(model, other, beam_size=3, max_decode_length=10)
  with_short = decoding.beam_decode(
    model, tf.concat([short, other], 0), beam_size=3, max_decode_length=10
  )
  with_long = decoding.beam_decode(
    model, tf.concat([long, other], 0), beam_size=3, max_decode_length=10
  )
  for a, b, c in zip(alone, with_short, with_long):
    np.testing.assert_allclose(a[0], b[1], atol=1e-4)
    np.testing.assert_allclose(a[0], c[1], atol=1e-4)
  greedy_alone = decoding.greedy_decode(model, other, max_decode_length=10)[0]
  greedy_batched = decoding.greedy_decode(
    model, tf.concat([short, other], 0), max_decode_length=10
  )[0]
  np.testing.assert_array_equal(greedy_alone[0], greedy_batched[1])


def test_default_length_follows_the_source_and_the_config_cap():
  model = _model(7, max_length=16)  # a short cap: the capped search runs eagerly, step by step
  source = random_ids(1, 5, VOCAB, 7)
  ids = decoding.greedy_decode(model, source, extra_decode_length=4).ids
  assert ids.shape[1] == 9
  ids = decoding.greedy_decode(model, source, extra_decode_length=500).ids
  assert ids.shape[1] == model.config.max_length


@pytest.mark.parametrize("window", [None, 2])
def test_an_empty_source_translates_the_same_alone_and_in_any_batch(window):
  """An empty source's every key is padding: its cross-attention (and an encoder query's) sees
  nothing, as over zero keys, so its output does not depend on how much padding its
  batch-mates add (a softmax over the masked keys made it change with them)."""
  model = _model(11)
  if window:
    model = tfattn.Transformer(model.config.replace(attention_window=window))
  alone = decoding.greedy_decode(model, tf.zeros([1, 0], tf.int32), max_decode_length=6)
  for width, seed in ((3, 1), (9, 2)):
    batch = tf.concat([tf.zeros([1, width], tf.int32), random_ids(2, width, VOCAB, seed)], 0)
    for padded_decode in (False, True):
      found = decoding.greedy_decode(model, batch, max_decode_length=6, padded_decode=padded_decode)
      np.testing.assert_array_equal(found.ids[0], alone.ids[0])
      np.testing.assert_allclose(found.log_probs[0], alone.log_probs[0], atol=1e-5)


def test_a_fixed_length_past_the_positions_is_capped_at_max_length():
  """A learned position table has max_length rows: --max_decode_length beyond it decodes up to
  max_length tokens (it read position max_length, out of the table, before the fix)."""
  config = tfattn.TransformerConfig.preset(
    "tiny", source_vocab_size=VOCAB, target_vocab_size=VOCAB, max_length=8
  )
  model = tfattn.Transformer(config.replace(position_encoding="learned"))
  source = random_ids(2, 3, VOCAB, 9)
  for padded_decode in (False, True):
    found = decoding.greedy_decode(model, source, max_decode_length=12, padded_decode=padded_decode)
    assert found.ids.shape == (2, 8)


def test_default_length_limit_is_per_example():
  """An output that never reaches EOS stops at its own source length + extra, whatever else is
  in the batch."""
  model = _model(8, eos_boost=-30.0)  # never says EOS
  short = tf.constant([[5, 6, 0, 0, 0, 0, 0, 0]])
  long = random_ids(1, 8, VOCAB, 8)
  alone_greedy = decoding.greedy_decode(model, short[:, :2], extra_decode_length=3)[0]
  batched_greedy = decoding.greedy_decode(
    model, tf.concat([short, long], 0), extra_decode_length=3
  )[0]
  assert alone_greedy.shape[1] == 5 and batched_greedy.shape[1] == 11
  np.testing.assert_array_equal(batched_greedy[0, :5], alone_greedy[0])
  assert (batched_greedy[0, 5:].numpy() == 0).all()
  alone_beam = decoding.beam_decode(model, short[:, :2], beam_size=2, extra_decode_length=3)
  batched_beam = decoding.beam_decode(
    model, tf.concat([short, long], 0), beam_size=2, extra_decode_length=3
  )
  np.testing.assert_array_equal(batched_beam[0][0, :, :5], alone_beam[0][0])
  np.testing.assert_allclose(batched_beam[1][0], alone_beam[1][0], atol=1e-5)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_beam_search_returns_beam_size_real_hypotheses_when_it_stops_early(seed):
  """A model that ends most sequences at once settles the search early; every slot must still
  hold a distinct hypothesis the model can score, not padding with a -1e9 score."""
  model = _model(seed, eos_boost=6.0)
  source = random_ids(3, 6, VOCAB, seed + 30)
  beam, alpha = 4, 0.6
  ids, scores, log_probs = decoding.beam_decode(
    model, source, beam_size=beam, alpha=alpha, extra_decode_length=6
  )
  ids, scores = ids.numpy(), scores.numpy()
  assert (scores > -1e6).all(), scores
  assert (np.diff(scores, axis=1) <= 1e-6).all(), scores
  flat_ids = ids.reshape(3 * beam, -1)
  lengths = _lengths(flat_ids)
  assert (flat_ids[:, 0] != 0).all(), "a returned hypothesis is empty padding"
  for row in ids:
    assert len({tuple(hypothesis) for hypothesis in row}) == beam, row
  recomputed = _recomputed_log_probs(
    model, tf.repeat(source, beam, axis=0), tf.constant(flat_ids)
  ).reshape(3, beam)
  np.testing.assert_allclose(log_probs, recomputed, atol=1e-4)
  penalty = ((5.0 + lengths.reshape(3, beam)) / 6.0) ** alpha
  np.testing.assert_allclose(scores, recomputed / penalty, atol=1e-4)


def test_reorder_beams_works_on_any_nested_cache():
  """Beam reordering knows nothing of the cache's structure: dicts, lists, NamedTuples and
  tensors of any rank are all reordered along their flattened `[batch * beam]` axis."""
  batch, beam = 2, 3

  def rows(*trailing):  # row r of a `[batch * beam, ...]` tensor is filled with r
    ids = tf.range(batch * beam, dtype=tf.float32)
    return tf.broadcast_to(tf.reshape(ids, [-1] + [1] * len(trailing)), [batch * beam, *trailing])

  Pair = collections.namedtuple("Pair", ["left", "right"])
  cache = {
    "layers": [Pair(rows(4, 2), rows()), Pair(rows(1), rows(2, 2, 2))],
    "extra": (tf.cast(rows(5), tf.int32),),
  }
  beam_indices = tf.constant([[2, 2, 0], [1, 0, 0]])
  reordered = decoding.reorder_beams(cache, beam_indices, beam)
  tf.nest.assert_same_structure(cache, reordered)
  expected_rows = np.array([2, 2, 0, 3 + 1, 3 + 0, 3 + 0])
  for before, after in zip(tf.nest.flatten(cache), tf.nest.flatten(reordered)):
    assert after.shape == before.shape and after.dtype == before.dtype
    np.testing.assert_array_equal(after.numpy(), before.numpy()[expected_rows])


# --- Options, n-best and sampling on the real model -----------------------------------------


def _assert_same_hypotheses(result, expected, atol=1e-4):
  np.testing.assert_array_equal(result.ids, expected.ids)
  np.testing.assert_allclose(result.scores, expected.scores, atol=atol)
  np.testing.assert_allclose(result.log_probs, expected.log_probs, atol=atol)


def test_decode_runs_the_strategy_its_options_name():
  model = _model(9)
  source = random_ids(3, 6, VOCAB, 9)
  options = DecodeOptions(alpha=0.8, max_decode_length=10)
  lengths = dict(alpha=0.8, max_decode_length=10)
  _assert_same_hypotheses(
    decoding.decode(model, source, options.replace(strategy="greedy")),
    decoding.greedy_decode(model, source, **lengths),
  )
  _assert_same_hypotheses(
    decoding.decode(model, source, options.replace(beam_size=3)),
    decoding.first_beam(decoding.beam_decode(model, source, beam_size=3, **lengths)),
  )
  sample = options.replace(strategy="sample", top_k=5, seed=11)
  _assert_same_hypotheses(
    decoding.decode(model, source, sample),
    decoding.sample_decode(model, source, top_k=5, seeds=tf.constant([11, 12, 13]), **lengths),
  )


def test_greedy_scores_are_log_probs_over_the_length_penalty():
  model = _model(10, eos_boost=1.0)
  source = random_ids(4, 6, VOCAB, 10)
  result = decoding.greedy_decode(model, source, alpha=0.6, extra_decode_length=5)
  lengths = _lengths(result.ids)
  assert len(set(lengths)) > 1, lengths  # some stop at EOS, some at their limit
  np.testing.assert_allclose(
    result.log_probs, _recomputed_log_probs(model, source, result.ids), atol=1e-4
  )
  np.testing.assert_allclose(
    result.scores, result.log_probs / ((5.0 + lengths) / 6.0) ** 0.6, atol=1e-5
  )


@pytest.mark.parametrize("strategy", ["greedy", "beam", "sample"])
def test_nbest_returns_beam_size_distinct_hypotheses_best_first(strategy):
  model = _model(11, eos_boost=3.0)
  source = random_ids(3, 6, VOCAB, 11)
  options = DecodeOptions(strategy=strategy, beam_size=4, alpha=0.6, max_decode_length=12)
  result = decoding.nbest(model, source, options)
  ids, scores = result.ids.numpy(), result.scores.numpy()
  assert ids.shape == (3, 4, 12) and scores.shape == result.log_probs.shape == (3, 4)
  assert (np.diff(scores, axis=1) <= 1e-6).all(), scores
  for row in ids:
    assert len({tuple(hypothesis) for hypothesis in row}) == 4, row
  flat_ids = ids.reshape(12, -1)
  recomputed = _recomputed_log_probs(
    model, tf.repeat(source, 4, axis=0), tf.constant(flat_ids)
  ).reshape(3, 4)
  np.testing.assert_allclose(result.log_probs, recomputed, atol=1e-4)
  penalty = ((5.0 + _lengths(flat_ids).reshape(3, 4)) / 6.0) ** 0.6
  np.testing.assert_allclose(scores, recomputed / penalty, atol=1e-4)
  _assert_same_hypotheses(
    decoding.first_beam(result), decoding.decode(model, source, options.replace(strategy="beam"))
  )


@pytest.mark.parametrize("seed", [0, 1])
def test_sampling_towards_temperature_zero_is_greedy(seed):
  model = _model(seed)
  source = random_ids(4, 6, VOCAB, seed + 40)
  greedy = decoding.greedy_decode(model, source, max_decode_length=12)
  sampled = decoding.sample_decode(
    model, source, max_decode_length=12, temperature=1e-6, seeds=tf.range(4) + 100 * seed
  )
  _assert_same_hypotheses(sampled, greedy)
  warm = decoding.sample_decode(
    model, source, max_decode_length=12, temperature=2.0, seeds=tf.range(4) + 100 * seed
  )
  assert not np.array_equal(warm.ids, greedy.ids)  # a real draw, not the argmax


def test_a_row_samples_the_same_whatever_its_batch_mates():
  model = _model(12, eos_boost=1.0)
  row = random_ids(1, 6, VOCAB, 12)
  short = tf.constant([[5, 6, 0, 0, 0, 0]])
  others = random_ids(3, 6, VOCAB, 13)
  options = dict(extra_decode_length=6, temperature=1.2, top_k=8, top_p=0.95)
  alone = decoding.sample_decode(model, row, seeds=tf.constant([77]), **options)
  again = decoding.sample_decode(model, row, seeds=tf.constant([77]), **options)
  _assert_same_hypotheses(again, alone, atol=0)  # the same seed: the same ids
  for mates, seeds in (
    (tf.concat([others, row], 0), [1, 2, 3, 77]),
    (tf.concat([row, short], 0), [77, 5]),
  ):
    batched = decoding.sample_decode(model, mates, seeds=tf.constant(seeds), **options)
    place = seeds.index(77)
    np.testing.assert_array_equal(batched.ids[place, : alone.ids.shape[1]], alone.ids[0])
    np.testing.assert_allclose(batched.log_probs[place], alone.log_probs[0], atol=1e-4)
  other_seed = decoding.sample_decode(model, tf.repeat(row, 8, 0), seeds=tf.range(8), **options)
  assert len({tuple(ids) for ids in other_seed.ids.numpy()}) > 1  # seeds matter


@pytest.mark.slow  # XLA compiles
@pytest.mark.parametrize("cut", [dict(top_k=6, top_p=0.9), dict(top_p=0.8)])  # both draw paths
def test_sampling_under_xla_draws_what_graph_mode_draws(cut):
  model = _model(13, eos_boost=1.5)
  spec = [tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([None], tf.int64)]
  options = DecodeOptions(strategy="sample", temperature=0.8, max_decode_length=10, **cut)

  def sample(source, seeds, padded_decode):
    return decoding.decode(model, source, options, seeds=seeds, padded_decode=padded_decode)

  graph = tf.function(
    lambda s, seeds: sample(s, seeds, False), input_signature=spec, autograph=False
  )
  xla = tf.function(
    lambda s, seeds: sample(s, seeds, True), input_signature=spec, jit_compile=True, autograph=False
  )
  for batch, length in ((4, 6), (7, 9)):
    source = random_ids(batch, length, VOCAB, batch)
    seeds = tf.range(batch, dtype=tf.int64) * 1000 + 3
    compiled, expected = xla(source, seeds), graph(source, seeds)
    assert_same_answers_but_a_near_tie(
      [(tuple(i), float(p)) for i, p in zip(compiled.ids.numpy(), compiled.log_probs.numpy())],
      [(tuple(i), float(p)) for i, p in zip(expected.ids.numpy(), expected.log_probs.numpy())],
    )
  assert xla.experimental_get_tracing_count() == 1


# --- The rules Marian's decoding needs (issue 50), each a DecodeOptions field ---------------


def _teacher_forced_log_probs(model, source, ids, banned=()):
  """log_softmax of the teacher-forced logits `[rows, length, vocab]`, banned ids removed from
  the distribution (as never_generate does)."""
  start = tf.fill([tf.shape(ids)[0], 1], model.config.start_id)
  logits = model(source, tf.concat([start, ids[:, :-1]], 1)).numpy()
  logits[..., list(banned)] = -1e9
  return tf.nn.log_softmax(logits).numpy()


def test_never_generate_takes_ids_out_of_the_distribution():
  model = _model(3, eos_boost=0.0)
  source = random_ids(3, 6, VOCAB, 40)
  free = decoding.greedy_decode(model, source, max_decode_length=10).ids.numpy()
  banned = tuple(sorted(set(free[:, :3].reshape(-1)) - {model.config.eos_id}))[:3]
  for strategy in ("greedy", "beam", "sample"):
    options = DecodeOptions(
      strategy=strategy,
      beam_size=3,
      max_decode_length=10,
      never_generate=",".join(map(str, banned)),
    )
    found = decoding.decode(model, source, options)
    ids = found.ids.numpy()
    assert not np.isin(ids, banned).any(), (strategy, ids)
    log_probs = _teacher_forced_log_probs(model, source, found.ids, banned)
    token = np.take_along_axis(log_probs, ids[..., None], -1)[..., 0]
    mask = np.arange(ids.shape[1])[None] < _lengths(ids)[:, None]
    np.testing.assert_allclose(found.log_probs, (token * mask).sum(-1), atol=1e-4)
  with pytest.raises(ValueError, match="never_generate holds ids \\[24\\] outside"):
    decoding.greedy_decode(model, source, never_generate="24")


@pytest.mark.parametrize("strategy", ["greedy", "beam", "sample"])
def test_min_decode_length_bans_end_until_that_many_tokens(strategy):
  """A model that says END at once: with min_decode_length=m every output has m tokens, then
  END (CTranslate2's min_decoding_length: END not counted), and log-probs stay the model's."""
  model = _model(4, eos_boost=8.0)
  source = random_ids(3, 6, VOCAB, 41)
  options = DecodeOptions(strategy=strategy, beam_size=3, max_decode_length=12)
  assert (decoding.decode(model, source, options).ids.numpy()[:, 0] == 2).all()
  found = decoding.decode(model, source, options.replace(min_decode_length=4))
  ids = found.ids.numpy()
  assert (ids[:, :4] != 2).all() and (ids[:, 4] == 2).all(), ids
  np.testing.assert_allclose(
    found.log_probs, _recomputed_log_probs(model, source, found.ids), atol=1e-4
  )


@pytest.mark.parametrize("seed", [0, 1])
def test_power_length_penalty_divides_by_length_to_the_alpha(seed):
  model = _model(seed)
  source = random_ids(2, 6, VOCAB, seed + 50)
  ids, scores, log_probs = decoding.beam_decode(
    model, source, beam_size=3, alpha=1.0, length_penalty="power", max_decode_length=12
  )
  flat_ids = tf.reshape(ids, [6, 12])
  recomputed = _recomputed_log_probs(model, tf.repeat(source, 3, axis=0), flat_ids).reshape(2, 3)
  np.testing.assert_allclose(log_probs, recomputed, atol=1e-4)
  np.testing.assert_allclose(scores, recomputed / _lengths(flat_ids).reshape(2, 3), atol=1e-4)
  assert (np.diff(scores.numpy(), axis=1) <= 1e-6).all()


@pytest.mark.parametrize("strategy", ["greedy", "beam"])
def test_end_at_limit_forces_end_as_the_last_token_at_no_cost(strategy):
  model = _model(5, eos_boost=-30.0)  # never says END by itself
  source = random_ids(2, 6, VOCAB, 42)
  options = DecodeOptions(strategy=strategy, beam_size=3, max_decode_length=6)
  cut = decoding.decode(model, source, options)
  assert (cut.ids.numpy() != 2).all()
  found = decoding.decode(model, source, options.replace(end_at_limit=True))
  ids = found.ids.numpy()
  assert (ids[:, 5] == 2).all() and (ids[:, :5] != 2).all(), ids
  recomputed = _recomputed_log_probs(model, source, found.ids)
  end = _teacher_forced_log_probs(model, source, found.ids)[:, 5, 2]
  np.testing.assert_allclose(found.log_probs, recomputed - end, atol=1e-4)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_current_beam_stop_never_runs_longer_and_equals_bound_without_a_penalty(seed):
  """transformers' early_stopping=False heuristic: with alpha 0 its bound is exact, so it finds
  what the exact search finds; with alpha > 0 it settles no later."""
  model = _model(seed, eos_boost=1.5)
  source = random_ids(3, 6, VOCAB, seed + 60)
  for alpha in (0.0, 1.0):
    options = DecodeOptions(beam_size=4, alpha=alpha, length_penalty="power", max_decode_length=14)
    exact = decoding.nbest(model, source, options)
    current = decoding.nbest(model, source, options.replace(beam_stop="current"))
    if alpha == 0.0:
      np.testing.assert_array_equal(exact.ids, current.ids)
      np.testing.assert_allclose(exact.scores, current.scores, atol=1e-5)
    assert (current.scores.numpy() > -1e6).all()
    # Each finished hypothesis is a real one, scored as the model scores it.
    flat = tf.reshape(current.ids, [12, -1])
    recomputed = _recomputed_log_probs(model, tf.repeat(source, 4, axis=0), flat).reshape(3, 4)
    np.testing.assert_allclose(current.log_probs, recomputed, atol=1e-4)


def test_decoder_start_id_is_what_the_decoder_reads_first():
  """With decoder_start_id set, decoding starts from it (not bos_id): the cached search equals
  the teacher-forced reference, which starts from the same id."""
  config = tfattn.TransformerConfig.preset(
    "tiny", source_vocab_size=VOCAB, target_vocab_size=VOCAB, decoder_start_id=VOCAB - 1, seed=9
  )
  model = tfattn.Transformer(config)
  source = random_ids(2, 5, VOCAB, 43)
  options = DecodeOptions(strategy="greedy", max_decode_length=8)
  found = decoding.decode(model, source, options)
  np.testing.assert_array_equal(found.ids, reference_decode(model, source, options).ids)
  np.testing.assert_allclose(
    found.log_probs, _recomputed_log_probs(model, source, found.ids), atol=1e-4
  )
  other = decoding.decode(
    tfattn.Transformer(config.replace(decoder_start_id=None)), source, options
  )
  assert config.start_id == VOCAB - 1 and config.replace(decoder_start_id=None).start_id == 1
  assert not np.allclose(found.log_probs, other.log_probs)


# --- Dropping finished examples (graph mode) --------------------------------------------------


class _MemoryModel:
  """A stand-in model whose next token depends on its example's memory and on its own cache, so
  a row that read another example's memory or cache row after a compaction writes other ids:
  logits = memory[example] + one-hot(the row's last token + its cached token sum) * 2. Example
  b is allowed END from step ends[b] on (ends differ: examples finish at different steps)."""

  def __init__(self, vocab=11, seed=0):
    self.vocab = vocab
    self.rows_seen = tf.Variable(0, dtype=tf.int64)
    rng = np.random.default_rng(seed)
    self.table = tf.constant(rng.normal(size=[64, vocab]).astype(np.float32))

  def start_decoding(self, source_ids, options, *, beams=1, padded=False):
    batch = tf.shape(source_ids)[0]
    lengths = tf.reduce_sum(tf.cast(source_ids > 0, tf.int32), 1)  # [batch]
    memory = (tf.gather(self.table, source_ids[:, 0] % 64), lengths)  # [batch, vocab], [batch]
    vocab = self.vocab

    def step_fn(ids, last_tokens, step, cache, memory):
      rows = tf.shape(last_tokens)[0]
      counted = self.rows_seen.assign_add(tf.cast(rows, tf.int64))
      table, ends = tf.nest.map_structure(lambda t: decoding.tile_beams(t, beams), memory)
      summed = cache + last_tokens  # [rows]
      logits = table + 2.0 * tf.one_hot(summed % vocab, vocab)
      may_end = step >= ends  # [rows]
      logits = tf.where(
        tf.equal(tf.range(vocab), 2)[tf.newaxis],
        tf.where(may_end, 3.0, -1e9)[:, tf.newaxis],
        logits,
      )
      logits = tf.where(tf.range(vocab)[tf.newaxis] < 2, -1e9, logits)  # no PAD, no START
      with tf.control_dependencies([counted]):
        return tf.identity(logits), summed

    return decoding.DecodingStart(
      step_fn=step_fn,
      cache=tf.zeros([batch * beams], tf.int32),
      first_tokens=tf.fill([batch], 1),
      limits=tf.fill([batch], 20),
      length=20,
      max_steps=20,
      pad_id=0,
      eos_id=2,
      memory=memory,
      compact=not padded,
    )


def _search(model, source, options, compact_at):
  @tf.function(autograph=False)
  def run(source):
    if options.strategy == "beam":
      start = model.start_decoding(source, options, beams=options.beam_size)
      return decoding.beam_search(start, options, compact_at=compact_at)
    start = model.start_decoding(source, options)
    if options.strategy == "sample":
      return decoding.sample_loop(start, options, compact_at=compact_at)
    return decoding.token_loop(start, options, compact_at=compact_at)

  model.rows_seen.assign(0)
  found = run(source)
  return found, int(model.rows_seen.numpy())


_STRATEGIES = [
  DecodeOptions(strategy="greedy"),
  DecodeOptions(strategy="sample", seed=3),
  DecodeOptions(strategy="beam", beam_size=3, alpha=0.6),
  DecodeOptions(strategy="beam", beam_size=3, alpha=0.6, beam_stop="current"),
]


@pytest.mark.parametrize("options", _STRATEGIES, ids=["greedy", "sample", "bound", "current"])
@pytest.mark.parametrize("compact_at", [1.0, 0.5])
def test_finished_examples_leave_the_batch_and_every_answer_stays(options, compact_at):
  """Examples finishing at different steps leave the working batch (fewer rows computed), and
  each keeps its memory and cache rows: the same ids and scores as with every row kept."""
  model = _MemoryModel()
  lengths = [1, 9, 3, 14, 5, 2, 11]  # each example may end from its own length's step on
  source = tf.constant([[4 + i] * n + [0] * (14 - n) for i, n in enumerate(lengths)])
  kept, rows_kept = _search(model, source, options, None)
  dropped, rows_dropped = _search(model, source, options, compact_at)
  np.testing.assert_array_equal(dropped.ids, kept.ids)
  np.testing.assert_allclose(dropped.scores, kept.scores, atol=1e-5)
  np.testing.assert_allclose(dropped.log_probs, kept.log_probs, atol=1e-5)
  assert rows_dropped < rows_kept * (0.8 if compact_at == 1.0 else 0.9), (rows_dropped, rows_kept)


@pytest.mark.parametrize("strategy", ["greedy", "beam", "sample"])
def test_a_transformer_answers_the_same_with_rows_leaving_early(strategy):
  """The Transformer's graph search with finished examples dropped after every step (their
  cache rows, cross-attention keys and values, limits) against every row kept."""
  model = _model(4, eos_boost=1.5)
  source = random_ids(6, 9, VOCAB, 4).numpy()
  for i, n in enumerate([9, 1, 4, 0, 7, 2]):
    source[i, n:] = 0
  options = DecodeOptions(strategy=strategy, beam_size=3, alpha=0.6, extra_decode_length=6)

  def run(compact_at):
    @tf.function(autograph=False)
    def search(source):
      if strategy == "beam":
        start = model.start_decoding(source, options, beams=3)
        return decoding.first_beam(decoding.beam_search(start, options, compact_at=compact_at))
      start = model.start_decoding(source, options)
      if strategy == "sample":
        return decoding.sample_loop(start, options, compact_at=compact_at)
      return decoding.token_loop(start, options, compact_at=compact_at)

    found = search(tf.constant(source))
    return [(tuple(i), s) for i, s in zip(found.ids.numpy().tolist(), found.scores.numpy())]

  kept = run(None)
  assert len({sum(t != 0 for t in ids) for ids, _ in kept}) > 2  # rows finish at several steps
  assert_same_answers_but_a_near_tie(run(1.0), kept, near_ties=0)
