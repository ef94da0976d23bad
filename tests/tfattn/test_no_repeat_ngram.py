"""`DecodeOptions.no_repeat_ngram_size` (issue 40): one field and one function
(`decoding.banned_by_ngrams`), checked against brute force, in every search; the reported
log-probabilities stay the model's."""

import functools

import numpy as np
import pytest
import tensorflow as tf

import tfattn
from tfattn import decoding

from conftest import random_ids

VOCAB = 9  # small, so that a random model repeats itself often


def _brute_force_banned(ids, step, n):
  """{row: set of banned tokens}, by the definition: a token that would complete an n-gram
  already present among ids[row, 0..step]."""
  banned = {}
  for row, tokens in enumerate(np.asarray(ids)[:, : step + 1].tolist()):
    tail = tuple(tokens[len(tokens) - n + 1 :]) if n > 1 else ()
    banned[row] = {
      tokens[j + n - 1]
      for j in range(len(tokens) - n + 1)
      if tuple(tokens[j : j + n - 1]) == tail and len(tokens) >= n
    }
  return banned


@pytest.mark.parametrize("n", [1, 2, 3])
def test_banned_tokens_are_the_brute_force_set(n):
  ids = np.random.RandomState(n).randint(0, 4, size=[5, 12]).astype(np.int32)
  for step in range(12):
    mask = decoding.banned_by_ngrams(tf.constant(ids), tf.constant(step), n, VOCAB).numpy()
    got = {row: set(np.flatnonzero(mask[row]).tolist()) for row in range(5)}
    assert got == _brute_force_banned(ids, step, n), (n, step)


def _model(seed):
  config = tfattn.TransformerConfig.preset(
    "tiny",
    source_vocab_size=VOCAB,
    target_vocab_size=VOCAB,
    tie_output_embedding=False,
    seed=seed,
    max_length=32,
  )
  model = tfattn.Transformer(config)
  bias = np.zeros([VOCAB], np.float32)
  bias[config.pad_id], bias[config.bos_id], bias[config.eos_id] = -30.0, -30.0, -3.0
  model.output_projection.bias.assign(bias)
  return model


def _reference_greedy(model, source, length, n):
  """Greedy by brute force: the whole prefix through the model at every step (no cache), the
  banned tokens by definition, the log-probabilities of the model's own softmax."""
  bos, eos, pad = model.config.bos_id, model.config.eos_id, model.config.pad_id
  rows = []
  for row in range(source.shape[0]):
    tokens, log_prob = [bos], 0.0
    for _ in range(length):
      logits = model(source[row : row + 1], tf.constant([tokens]))[0, -1].numpy()
      log_probs = logits - np.logaddexp.reduce(logits)
      banned = _brute_force_banned(np.array([tokens]), len(tokens) - 1, n)[0]
      allowed = np.where([t in banned for t in range(VOCAB)], -np.inf, logits)
      token = int(np.argmax(allowed))
      tokens.append(token)
      log_prob += log_probs[token]
      if token == eos:
        break
    ids = tokens[1:] + [pad] * (length - len(tokens) + 1)
    rows.append((ids, log_prob))
  return np.array([r[0] for r in rows]), np.array([r[1] for r in rows])


@functools.cache
def _bigram_case(seed):
  """(model, source, brute-force greedy ids and log-probs without repeated bigrams): one
  reference per seed for the graph and the XLA test (each is 36 eager forward passes)."""
  model, source = _model(seed), random_ids(3, 5, VOCAB, seed)
  return model, source, _reference_greedy(model, source, 12, 2)


def _has_repeat(row_ids, start, n, eos):
  tokens = [start, *row_ids]
  if eos in row_ids:
    tokens = tokens[: tokens.index(eos, 1) + 1]
  grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
  return len(grams) != len(set(grams))


@pytest.mark.parametrize("seed", [0, 1])
def test_greedy_without_repeated_bigrams_is_the_brute_force_search(seed):
  model, source, (expected_ids, expected_log_probs) = _bigram_case(seed)
  plain = decoding.greedy_decode(model, source, max_decode_length=12)
  assert any(_has_repeat(row, 1, 2, 2) for row in plain.ids.numpy().tolist())  # it would repeat
  result = decoding.greedy_decode(model, source, max_decode_length=12, no_repeat_ngram_size=2)
  np.testing.assert_array_equal(result.ids.numpy(), expected_ids)
  np.testing.assert_allclose(result.log_probs.numpy(), expected_log_probs, atol=1e-4)


@pytest.mark.slow  # XLA compiles
@pytest.mark.parametrize("seed", [0, 1])
def test_greedy_without_repeated_bigrams_under_xla_is_the_brute_force_search(seed):
  model, source, (expected_ids, _) = _bigram_case(seed)
  xla = tf.function(
    lambda s: decoding.greedy_decode(
      model, s, max_decode_length=12, no_repeat_ngram_size=2, padded_decode=True
    ),
    jit_compile=True,
    autograph=False,
  )
  np.testing.assert_array_equal(xla(source).ids.numpy(), expected_ids)


def test_beam_and_sampling_never_repeat_and_report_the_models_log_probs():
  model, source = _model(3), random_ids(3, 5, VOCAB, 3)
  beams = decoding.beam_decode(
    model, source, beam_size=3, max_decode_length=10, no_repeat_ngram_size=2
  )
  sampled = decoding.sample_decode(
    model, source, max_decode_length=10, no_repeat_ngram_size=2, seed=4
  )
  every_beam = decoding.Hypotheses(
    ids=tf.reshape(beams.ids, [9, -1]),
    scores=tf.reshape(beams.scores, [9]),
    log_probs=tf.reshape(beams.log_probs, [9]),
  )
  for hypotheses, sources in (
    (every_beam, tf.repeat(source, 3, axis=0)),
    (sampled, source),
  ):
    ids = hypotheses.ids.numpy()
    assert not any(_has_repeat(row, 1, 2, 2) for row in ids.tolist())
    bos = tf.fill([ids.shape[0], 1], model.config.bos_id)
    log_probs = tf.nn.log_softmax(model(sources, tf.concat([bos, ids[:, :-1]], 1))).numpy()
    picked = np.take_along_axis(log_probs, ids[..., None], -1)[..., 0]
    ends = np.array([row.index(2) + 1 if 2 in row else len(row) for row in ids.tolist()])
    recomputed = np.where(np.arange(ids.shape[1])[None] < ends[:, None], picked, 0).sum(-1)
    np.testing.assert_allclose(hypotheses.log_probs.numpy(), recomputed, atol=1e-4)
