"""Sampling: the counter-based generator, the draw (temperature, top-k, top-p) and the sampling
loop on a stand-in model with known next-token distributions."""

import types

import numpy as np
import pytest
import tensorflow as tf

import tfattn
from tfattn import decoding, sampling

# Random123's known answers for Threefry-2x32-20: (key, counter) -> output words.
_THREEFRY_KNOWN_ANSWERS = [
  ((0x00000000, 0x00000000), (0x00000000, 0x00000000), (0x6B200159, 0x99BA4EFE)),
  ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
  ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0)),
]

# Next-token logits of the stand-in model: ids 0-2 (pad, start, end) are never drawn, so every
# row runs to its length limit; ids 3-10 have distinct, known probabilities.
_LOGITS = np.array([-1e9, -1e9, -1e9, 2.0, 1.5, 1.0, 0.5, 0.0, -0.5, -1.0, -1.5], np.float32)


class FixedLogitsModel:
  """Stands in for a `Transformer` in the decoding loop: every step's next-token logits are
  `logits`, whatever the source and the tokens so far (its `DecodingStart` has no cache)."""

  def __init__(self, logits, max_length=64):
    self.config = types.SimpleNamespace(pad_id=0, bos_id=1, eos_id=2, max_length=max_length)
    self.logits = tf.constant(logits, tf.float32)  # [vocab]

  def start_decoding(self, source_ids, options, beams=1, padded=False):
    del padded  # no cache
    length, limits = tfattn.Transformer.decoding_lengths(self, source_ids, options)  # its rule
    del beams  # every row's logits are the same

    def step_fn(ids, last_tokens, step, cache, memory):
      return tf.tile(self.logits[tf.newaxis], [tf.shape(last_tokens)[0], 1]), cache

    return decoding.DecodingStart(
      step_fn=step_fn,
      cache=(),
      first_tokens=tf.fill([tf.shape(source_ids)[0]], 1),
      limits=limits,
      length=length,
      max_steps=max(self.config.max_length, options.max_decode_length or 0),
      pad_id=0,
      eos_id=2,
    )


def _expected_probs(logits, temperature=1.0, top_k=0, top_p=1.0):
  """numpy reference: softmax(logits / T), cut to the top k (ties at the k-th place: the lower
  id first, as `tf.math.top_k`), then to the nucleus of p: the shortest prefix of the sorted
  tokens holding p, and every token tied with the prefix's last one (with or without a top-k
  cut)."""
  probs = np.exp((logits - logits.max()) / temperature)
  probs /= probs.sum()
  order = np.argsort(-probs, kind="stable")
  keep = np.zeros_like(probs, bool)
  keep[order[: top_k or len(probs)]] = True
  probs = np.where(keep, probs, 0.0) / probs[keep].sum()
  mass_before = np.cumsum(probs[order]) - probs[order]
  nucleus = np.zeros_like(keep)
  nucleus[order[mass_before < top_p]] = True
  nucleus |= keep & (probs >= probs[nucleus].min())
  probs = np.where(nucleus & keep, probs, 0.0)
  return probs / probs.sum()


def _chi_square_p_value(counts, expected_probs):
  """Pearson's chi-square goodness-of-fit p-value over the categories with probability > 0."""
  support = expected_probs > 0
  expected = expected_probs[support] * counts.sum()
  statistic = ((counts[support] - expected) ** 2 / expected).sum()
  degrees = support.sum() - 1
  return float(tf.math.igammac(degrees / 2.0, statistic / 2.0))


@pytest.mark.parametrize("jit_compile", [False, True])
def test_threefry_matches_random123_known_answers(jit_compile):
  words = [
    tf.constant(column, tf.uint32)
    for column in zip(*[key + counter for key, counter, _ in _THREEFRY_KNOWN_ANSWERS])
  ]
  x0, x1 = tf.function(
    lambda k0, k1, c0, c1: sampling.threefry2x32((k0, k1), (c0, c1)),
    jit_compile=jit_compile,
    autograph=False,
  )(*words)
  assert list(zip(x0.numpy(), x1.numpy())) == [out for _, _, out in _THREEFRY_KNOWN_ANSWERS]


def test_uniforms_depend_only_on_the_row_seed_and_the_step():
  table = sampling.uniforms(tf.constant([5, 9, 5, -1, 2**40], tf.int64), 12).numpy()
  assert table.shape == (5, 12) and (table >= 0).all() and (table < 1).all()
  np.testing.assert_array_equal(table[0], table[2])  # the same seed, another place
  assert len({tuple(row) for row in table}) == 4
  alone = sampling.uniforms(tf.constant([9], tf.int32), 4).numpy()  # another batch and length
  np.testing.assert_array_equal(alone[0], table[1, :4])
  compiled = tf.function(lambda s: sampling.uniforms(s, 12), jit_compile=True, autograph=False)
  np.testing.assert_array_equal(compiled(tf.constant([5, 9, 5, -1, 2**40], tf.int64)), table)


def test_uniforms_are_uniform():
  """10,000 numbers in 10 equal bins: chi-square p-value above 0.001."""
  values = sampling.uniforms(tf.range(100), 100).numpy().ravel()
  counts = np.histogram(values, bins=10, range=(0.0, 1.0))[0]
  assert _chi_square_p_value(counts, np.full(10, 0.1)) > 1e-3, counts


# Draws on adversarial rows: random logits with ties and -inf-like entries, and the uniform
# numbers at both ends of [0, 1) as well as in between.
def _adversarial_rows(seed, rows=64, vocab=50):
  rng = np.random.default_rng(seed)
  logits = rng.normal(0.0, 3.0, [rows, vocab]).astype(np.float32)
  logits[:, :5] = logits[:, 5:10]  # ties
  logits[rows // 2 :, 10:20] = -1e9
  uniform = rng.uniform(0.0, 1.0, rows).astype(np.float32)
  uniform[:4] = [0.0, 1.0 - 2**-24, 0.5, 2**-24]
  return logits, uniform


@pytest.mark.parametrize("top_k", [1, 3, 10])
def test_top_k_never_leaves_the_k_best(top_k):
  for seed in range(3):
    logits, uniform = _adversarial_rows(seed)
    tokens = sampling.draw(
      tf.constant(logits), tf.constant(uniform), temperature=0.7, top_k=top_k
    ).numpy()
    kth_best = -np.sort(-logits, axis=1)[:, top_k - 1]
    assert (logits[np.arange(len(tokens)), tokens] >= kth_best).all()


@pytest.mark.parametrize("top_p,top_k", [(0.1, 0), (0.5, 0), (0.9, 0), (0.9, 5)])
def test_top_p_never_leaves_the_nucleus(top_p, top_k):
  for seed in range(3):
    logits, uniform = _adversarial_rows(seed)
    tokens = sampling.draw(
      tf.constant(logits), tf.constant(uniform), top_k=top_k, top_p=top_p
    ).numpy()
    for row, token in zip(logits, tokens):
      assert _expected_probs(row, top_k=top_k, top_p=top_p)[token] > 0


@pytest.mark.parametrize("top_p", [0.05, 0.5, 0.9, 0.999])
def test_the_nucleus_found_without_sorting_is_the_sorted_one(top_p):
  for seed in range(3):
    logits, _ = _adversarial_rows(seed)
    probs = tf.nn.softmax(logits)
    nucleus = sampling._nucleus(probs, top_p).numpy()
    for row, found in zip(logits, nucleus):
      np.testing.assert_array_equal(found, _expected_probs(row, top_p=top_p) > 0)


def test_a_top_k_beyond_the_vocabulary_keeps_every_token():
  logits, uniform = _adversarial_rows(0, vocab=20)
  np.testing.assert_array_equal(
    sampling.draw(logits, uniform, top_k=100), sampling.draw(logits, uniform)
  )


# 400 rows of 10 steps: 4,000 draws. A fixed significance of 0.001 (the seeds are fixed, so the
# test is deterministic; with random seeds a correct sampler would fail 1 run in 1,000).
@pytest.mark.parametrize(
  "temperature,top_k,top_p",
  [(1.0, 0, 1.0), (0.7, 0, 1.0), (2.0, 4, 1.0), (1.0, 0, 0.75), (1.5, 6, 0.9)],
)
def test_samples_follow_the_softmax(temperature, top_k, top_p):
  model = FixedLogitsModel(_LOGITS)
  rows, steps = 400, 10
  hypotheses = decoding.sample_decode(
    model,
    tf.ones([rows, 3], tf.int32),
    max_decode_length=steps,
    temperature=temperature,
    top_k=top_k,
    top_p=top_p,
    seeds=tf.range(rows) * 7919,
  )
  ids = hypotheses.ids.numpy()
  assert ids.shape == (rows, steps)
  counts = np.bincount(ids.ravel(), minlength=len(_LOGITS))
  expected = _expected_probs(_LOGITS, temperature, top_k, top_p)
  assert counts[expected == 0].sum() == 0, counts  # nothing outside the top k or the nucleus
  assert _chi_square_p_value(counts, expected) > 1e-3, (counts, expected * counts.sum())
  # Log-probabilities are the model's own, whatever the temperature and the cut.
  model_log_probs = _LOGITS - np.log(np.exp(_LOGITS - _LOGITS.max()).sum()) - _LOGITS.max()
  np.testing.assert_allclose(hypotheses.log_probs, model_log_probs[ids].sum(1), rtol=1e-5)
  penalty = ((5.0 + steps) / 6.0) ** 0.6
  np.testing.assert_allclose(hypotheses.scores, hypotheses.log_probs / penalty, rtol=1e-5)


def test_a_chi_square_bound_this_size_catches_a_wrong_temperature():
  """The test above can fail: draws at temperature 1 judged against temperature 0.85."""
  model = FixedLogitsModel(_LOGITS)
  ids = decoding.sample_decode(
    model, tf.ones([400, 3], tf.int32), max_decode_length=10, seeds=tf.range(400) * 7919
  ).ids.numpy()
  counts = np.bincount(ids.ravel(), minlength=len(_LOGITS))
  assert _chi_square_p_value(counts, _expected_probs(_LOGITS, 0.85)) < 1e-3


def test_source_seeds_ignore_padding_and_batch_mates():
  rows = tf.constant([[5, 6, 7, 0, 0], [5, 6, 7, 8, 9], [5, 6, 0, 0, 0]])
  seeds = sampling.source_seeds(rows, seed=3).numpy()
  alone = sampling.source_seeds(tf.constant([[5, 6, 7]]), seed=3).numpy()
  assert seeds[0] == alone[0] and len(set(seeds)) == 3
  assert sampling.source_seeds(rows, seed=4).numpy()[0] != seeds[0]


# Token 4 twice as likely as tokens 6 and 9, which tie; five tokens at e^-3 of those two.
_TIED_LOGITS = np.array(
  [-1e9, -1e9, -1e9, -3.0, np.log(2.0), -3.0, 0.0, -3.0, -3.0, 0.0, -3.0], np.float32
)


def _tie_at_the_nucleus_edge(top_k):
  """A top_p that the first of the tied twins reaches and the second would pass: the nucleus
  is then {4, 6, 9}, renormalised {4: 1/2, 6: 1/4, 9: 1/4} (computed here in numpy)."""
  probs = np.exp(_TIED_LOGITS - _TIED_LOGITS.max())
  if top_k:
    probs[np.argsort(-probs, kind="stable")[top_k:]] = 0.0
  probs /= probs.sum()
  return float(probs[4] + probs[6] / 2)


@pytest.mark.parametrize("jit_compile", [False, True])
@pytest.mark.parametrize("top_k", [0, 6])
def test_tokens_tied_at_the_nucleus_edge_are_all_kept(top_k, jit_compile):
  """Issue 33: with a top-k cut, token 9 (tied with 6) was never drawn: {4: .66, 6: .34}."""
  top_p = _tie_at_the_nucleus_edge(top_k)
  expected = _expected_probs(_TIED_LOGITS, top_k=top_k, top_p=top_p)
  np.testing.assert_allclose(expected[[4, 6, 9]], [0.5, 0.25, 0.25], rtol=1e-6)
  rows = 4000
  logits = tf.tile(tf.constant(_TIED_LOGITS)[tf.newaxis], [rows, 1])
  uniform = sampling.uniforms(tf.range(rows) * 7919, 1)[:, 0]
  tokens = tf.function(
    lambda x, u: sampling.draw(x, u, top_k=top_k, top_p=top_p),
    jit_compile=jit_compile,
    autograph=False,
  )(logits, uniform).numpy()
  counts = np.bincount(tokens, minlength=len(_TIED_LOGITS))
  assert counts[expected == 0].sum() == 0, counts
  assert _chi_square_p_value(counts, expected) > 1e-3, (counts, expected * rows)


@pytest.mark.parametrize(
  "temperature,padded_decode", [(1e-39, False), (1e-45, True), (1e-37, False)]
)
def test_underflowing_temperatures_draw_the_most_likely_tokens(temperature, padded_decode):
  """Issue 33: below float32's smallest normal, graph mode failed (id -1 gathered) and XLA
  silently returned id -1. Now the limit T -> 0: the argmax, or one of several tied maxima."""
  rows, steps = 64, 4
  twin_maxima = _LOGITS.copy()
  twin_maxima[7] = _LOGITS[3]
  for logits, allowed in ((_LOGITS, {3}), (twin_maxima, {3, 7})):
    model = FixedLogitsModel(logits)
    decode = tf.function(
      lambda s, seeds, model=model: decoding.sample_decode(
        model,
        s,
        max_decode_length=steps,
        temperature=temperature,
        top_k=4,
        seeds=seeds,
        padded_decode=padded_decode,
      ),
      jit_compile=padded_decode,
      autograph=False,
    )
    hypotheses = decode(tf.ones([rows, 3], tf.int32), tf.range(rows))
    ids = hypotheses.ids.numpy()
    # Nothing else, and both tied maxima drawn (256 draws of a fair coin).
    assert set(np.unique(ids)) == allowed and ids.shape == (rows, steps), np.unique(ids)
    assert np.isfinite(hypotheses.log_probs.numpy()).all()
    assert int(np.argmax(logits)) in allowed  # numpy's argmax is one of them
