"""Decoding a windowed model (`attention_window`) through its ring cache: greedy, beam and sampling,
in graph mode and under XLA, equal the uncached reference in which every self-attention is full
attention with a band bias; beams reorder through the ring; a language model's prompt prefill
fills the window."""

import numpy as np
import pytest
import tensorflow as tf

import tfattn
from tfattn import decoding, masking
from tfattn.attention import RingCache, SelfAttention
from tfattn.decode_options import DecodeOptions
from tfattn.language_model import LanguageModel
from tfattn.support.reference_decoding import reference_decode

from conftest import random_ids

VOCAB, WINDOW = 24, 2
PROMPTS = tf.constant([[5, 6, 7, 8, 9], [9, 10, 0, 0, 0], [0, 0, 0, 0, 0], [11, 3, 4, 0, 0]])
OPTIONS = (
  DecodeOptions(strategy="greedy", max_decode_length=9),
  DecodeOptions(strategy="beam", beam_size=3, max_decode_length=9),
  DecodeOptions(strategy="sample", top_k=8, max_decode_length=9),
)


def _config(seed, window=WINDOW):
  return tfattn.TransformerConfig.preset(
    "tiny",
    source_vocab_size=VOCAB,
    target_vocab_size=VOCAB,
    max_length=32,
    seed=seed,
    attention_window=window,
  )


def _full_with_band(self, q, k, v, bias, training, return_scores):
  """A windowed self-attention computed as full attention with a band bias."""
  band = masking.band_bias(tf.shape(q)[2], self.window, self.causal)
  return self._attend(q, k, v, masking.combine(band, bias), training, return_scores)


def _reference(model, inputs, options, seeds):
  """Uncached: the model reruns the whole prefix every step (beams too)."""
  return reference_decode(model, inputs, options, seeds=seeds)


def _decoded(model, inputs, seeds, strategies, compiled):
  """{options: [graph, xla]} through the ring cache, xla for the `compiled` strategies only."""
  found = {}
  for options in strategies:

    def run(inputs, seeds, padded, options=options):
      return decoding.decode(model, inputs, options, seeds=seeds, padded_decode=padded)

    found[options] = [tf.function(lambda i, s: run(i, s, False), autograph=False)(inputs, seeds)]
    if options in compiled:
      xla = tf.function(lambda i, s: run(i, s, True), autograph=False, jit_compile=True)
      found[options].append(xla(inputs, seeds))
  return found


def _assert_same(found, expected):
  np.testing.assert_array_equal(found.ids, expected.ids)
  np.testing.assert_allclose(found.log_probs, expected.log_probs, atol=1e-4)


@pytest.mark.slow  # XLA compiles searches
@pytest.mark.parametrize(
  "kind, strategies, compiled",
  [("transformer", OPTIONS[:2], OPTIONS[:1]), ("language_model", OPTIONS[1:], OPTIONS[1:])],
)
def test_ring_cache_decoding_equals_the_band_masked_reference(
  kind, strategies, compiled, monkeypatch
):
  """Greedy and beam for the Transformer, beam and sampling for the language model: every
  strategy, and beams reordering through the ring, in both kinds, in graph mode; under XLA
  every strategy once (greedy in the Transformer, beam and sampling in the language model: the
  ring and its beam reordering are the same decoder self-attention in both kinds, and three
  compiled searches cost less than four)."""
  if kind == "transformer":
    model = tfattn.Transformer(_config(4))
    inputs = random_ids(3, 7, VOCAB, 4)
  else:
    model = LanguageModel(_config(5))
    inputs = PROMPTS
  seeds = tf.range(tf.shape(inputs)[0], dtype=tf.int64) + 3
  found = _decoded(model, inputs, seeds, strategies, compiled)
  # The ring holds r + 1 slots whatever the length decoded.
  start = model.start_decoding(inputs, OPTIONS[0], padded=True)
  assert all(isinstance(c, RingCache) and c.key.shape[2] == WINDOW + 1 for c in start.cache)
  with monkeypatch.context() as patch:
    patch.setattr(SelfAttention, "_self_attend", _full_with_band)
    for options in strategies:
      expected = tf.function(_reference, autograph=False)(model, inputs, options, seeds)
      assert len(found[options]) == (2 if options in compiled else 1)
      for decoded in found[options]:  # graph mode, then XLA
        _assert_same(decoded, expected)


def test_the_window_changes_what_a_model_computes_and_its_weights_do_not():
  windowed, full = LanguageModel(_config(6)), LanguageModel(_config(6, window=None))
  ids = tf.constant([[1, 5, 6, 7, 8, 9, 10]])
  assert [v.name for v in windowed.variables] == [v.name for v in full.variables]
  np.testing.assert_allclose(windowed(ids)[:, : WINDOW + 1], full(ids)[:, : WINDOW + 1], atol=1e-5)
  assert float(tf.reduce_max(tf.abs(windowed(ids)[:, -1] - full(ids)[:, -1]))) > 1e-3
  _, weights = windowed(ids, return_attention=True)
  distance = np.arange(7)[:, None] - np.arange(7)[None]
  outside = (distance < 0) | (distance > WINDOW)
  assert (weights.decoder[0].numpy()[..., outside] == 0).all()


def test_greedy_through_the_ring_equals_the_band_masked_reference_in_graph_mode(monkeypatch):
  model = LanguageModel(_config(7))
  found = decoding.decode(model, PROMPTS, OPTIONS[0])
  monkeypatch.setattr(SelfAttention, "_self_attend", _full_with_band)
  _assert_same(found, _reference(model, PROMPTS, OPTIONS[0], None))
