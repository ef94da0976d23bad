"""The decoder-only language model: causal, tied embedding, and generation from ragged prompts
(greedy, beam, sampling; KV-cached, graph and XLA) against a brute-force reference that reruns
the whole unpadded sequence for every token."""

import numpy as np
import pytest
import tensorflow as tf

import tfattn
from tfattn import decoding
from tfattn.decode_options import DecodeOptions
from tfattn.language_model import LanguageModel, perplexity_sums
from tfattn.support.reference_decoding import reference_decode

VOCAB = 30
PROMPTS = tf.constant([[5, 6, 7, 8, 9], [9, 10, 0, 0, 0], [0, 0, 0, 0, 0], [11, 3, 4, 0, 0]])


def _model(seed=0, **changes):
  config = tfattn.TransformerConfig.preset(
    "tiny", source_vocab_size=VOCAB, target_vocab_size=VOCAB, max_length=32, seed=seed
  )
  return LanguageModel(config.replace(**changes))


def _brute_force_greedy(model, prompt, steps):
  """One prompt (no padding), the whole sequence rerun for each token, argmax in numpy."""
  sequence = [model.config.bos_id] + [int(t) for t in prompt if t]
  generated, log_prob = [], 0.0
  for _ in range(steps):
    logits = model(tf.constant([sequence]))[0, -1].numpy().astype(np.float64)
    log_probs = logits - logits.max() - np.log(np.exp(logits - logits.max()).sum())
    token = int(np.argmax(logits))
    generated.append(token)
    log_prob += log_probs[token]
    sequence.append(token)
    if token == model.config.eos_id:
      break
  return generated, log_prob


def test_the_model_is_causal_and_its_output_is_the_tied_embedding():
  model = _model()
  ids = tf.constant([[1, 5, 6, 7, 8, 9]])
  changed = tf.constant([[1, 5, 6, 7, 20, 21]])
  np.testing.assert_allclose(model(ids)[:, :4], model(changed)[:, :4], atol=1e-6)
  assert float(tf.reduce_max(tf.abs(model(ids)[:, 4:] - model(changed)[:, 4:]))) > 1e-4
  names = {v.name for v in model.trainable_variables}
  assert not any("output_projection" in name for name in names), names
  assert sum("embedding" in name for name in names) == 1
  _, weights = model(ids, return_attention=True)
  assert len(weights.decoder) == 2 and weights.decoder[0].shape == (1, 4, 6, 6)
  upper = np.triu(np.ones([6, 6]), 1).astype(bool)
  assert (weights.decoder[0].numpy()[..., upper] == 0).all()  # no weight on the future


@pytest.mark.parametrize(
  "changes", [dict(), dict(position_encoding="learned", norm_position="pre")]
)
def test_cached_greedy_from_ragged_prompts_equals_brute_force(changes):
  model = _model(1, **changes)
  found = decoding.greedy_decode(model, PROMPTS, max_decode_length=6)
  for row, prompt in enumerate(PROMPTS.numpy()):
    expected, log_prob = _brute_force_greedy(model, prompt, 6)
    np.testing.assert_array_equal(found.ids[row, : len(expected)], expected)
    assert (found.ids.numpy()[row, len(expected) :] == 0).all()
    np.testing.assert_allclose(found.log_probs[row], log_prob, atol=1e-4)


@pytest.mark.slow  # XLA compiles two searches
def test_beam_and_sampling_under_xla_and_uncached_decode_what_graph_mode_does():
  model = _model(2)
  seeds = tf.constant([3, 4, 5, 6], tf.int64)
  for options in (
    DecodeOptions(strategy="beam", beam_size=3, max_decode_length=4),
    DecodeOptions(strategy="sample", top_k=8, top_p=0.9, max_decode_length=4),
  ):

    def run(prompts, seeds, options=options, **how):
      return decoding.decode(model, prompts, options, seeds=seeds, **how)

    graph = tf.function(run, autograph=False)(PROMPTS, seeds)
    xla = tf.function(
      lambda p, s: run(p, s, padded_decode=True), jit_compile=True, autograph=False
    )(PROMPTS, seeds)
    uncached = tf.function(
      lambda p, s, o=options: reference_decode(model, p, o, seeds=s), autograph=False
    )(PROMPTS, seeds)
    for other in (xla, uncached):
      np.testing.assert_array_equal(other.ids, graph.ids)
      np.testing.assert_allclose(other.log_probs, graph.log_probs, atol=1e-4)


def test_a_prompt_continues_the_same_whatever_its_batch_mates():
  model = _model(3)
  prompt = PROMPTS[3:4]
  for options in (
    DecodeOptions(strategy="beam", beam_size=3, max_decode_length=6),
    DecodeOptions(strategy="sample", temperature=1.5, max_decode_length=6),
  ):
    alone = decoding.decode(model, prompt, options, seeds=tf.constant([9]))
    together = decoding.decode(model, PROMPTS, options, seeds=tf.constant([1, 2, 3, 9]))
    np.testing.assert_array_equal(together.ids[3], alone.ids[0])
    np.testing.assert_allclose(together.log_probs[3], alone.log_probs[0], atol=1e-4)


@pytest.mark.parametrize(
  "changes",
  [dict(position_encoding="learned"), dict(position_encoding="learned", attention_window=3)],
)
def test_a_prompt_at_the_position_limit_and_an_empty_one_decode_together_as_alone(changes):
  """The longer prompt reaches max_length after one token; its row keeps stepping while the
  empty prompt generates. Its position must stay inside the learned table (it read position
  max_length: `indices = 16 is not in [0, 16)`), and each row answers as alone."""
  model = _model(5, max_length=16, **changes)
  prompts = tf.constant([[7] * 15, [0] * 15, [9, 4] + [0] * 13])
  widths = [max(1, int(tf.reduce_sum(tf.cast(row > 0, tf.int32)))) for row in prompts]
  for options in (
    DecodeOptions(strategy="greedy", max_decode_length=16),
    DecodeOptions(strategy="beam", beam_size=2, max_decode_length=16),
  ):
    alone = [decoding.decode(model, prompts[r : r + 1, : widths[r]], options) for r in range(3)]
    for padded_decode in (False, True):
      together = decoding.decode(model, prompts, options, padded_decode=padded_decode)
      for row in range(3):
        np.testing.assert_array_equal(together.ids[row], alone[row].ids[0])
        np.testing.assert_allclose(together.log_probs[row], alone[row].log_probs[0], atol=1e-4)


def test_each_row_generates_up_to_its_own_max_new_tokens_as_if_that_were_its_limit():
  """`max_new_tokens` `[batch]`: a row asking n tokens gets what decoding it alone with
  max_decode_length=n gives (ids, log_prob, score), greedy, beam and sampling, graph and
  padded; the buffer stays the options' length."""
  model = _model(6)
  wanted = [3, 8, 1, 5]
  seeds = tf.constant([3, 4, 5, 6], tf.int64)
  for options in (
    DecodeOptions(strategy="greedy", max_decode_length=8),
    DecodeOptions(strategy="beam", beam_size=2, max_decode_length=8),
    DecodeOptions(strategy="sample", top_k=6, max_decode_length=8),
  ):
    alone = [
      decoding.decode(
        model,
        PROMPTS[row : row + 1],
        options.replace(max_decode_length=n),
        seeds=seeds[row : row + 1],
      )
      for row, n in enumerate(wanted)
    ]
    for padded_decode in (False, True):
      found = decoding.decode(
        model,
        PROMPTS,
        options,
        seeds=seeds,
        padded_decode=padded_decode,
        max_new_tokens=tf.constant(wanted),
      )
      assert found.ids.shape == (4, 8)
      for row, n in enumerate(wanted):
        np.testing.assert_array_equal(found.ids[row, :n], alone[row].ids[0])
        assert (found.ids.numpy()[row, n:] == 0).all()
        np.testing.assert_allclose(found.log_probs[row], alone[row].log_probs[0], atol=1e-4)
        np.testing.assert_allclose(found.scores[row], alone[row].scores[0], atol=1e-4)


def test_beams_are_scored_by_the_model_itself():
  """Every beam's log_prob equals the teacher-forced sum over its continuation."""
  model = _model(4)
  found = decoding.nbest(model, PROMPTS, DecodeOptions(beam_size=3, max_decode_length=4))
  for row, prompt in enumerate(PROMPTS.numpy()):
    context = [1] + [int(t) for t in prompt if t]
    for beam in range(3):
      continuation = [int(t) for t in found.ids[row, beam].numpy()]
      if 2 in continuation:
        continuation = continuation[: continuation.index(2) + 1]
      sequence = context + continuation
      log_probs = tf.nn.log_softmax(model(tf.constant([sequence[:-1]])))[0].numpy()
      expected = sum(log_probs[len(context) - 1 + i, t] for i, t in enumerate(continuation))
      np.testing.assert_allclose(found.log_probs[row, beam], expected, atol=1e-4)


def test_perplexity_sums_count_real_tokens_only():
  model = _model(5)
  ids = tf.constant([[1, 5, 6, 0], [1, 7, 0, 0]])
  targets = tf.constant([[5, 6, 2, 0], [7, 2, 0, 0]])
  nll, count = perplexity_sums(model, ids, targets)
  log_probs = tf.nn.log_softmax(model(ids)).numpy()
  expected = -sum(
    log_probs[b, i, t] for b, row in enumerate(targets.numpy()) for i, t in enumerate(row) if t
  )
  assert float(count) == 5
  np.testing.assert_allclose(float(nll), expected, rtol=1e-5)


@pytest.mark.parametrize("changes", [{}, {"position_encoding": "learned"}])
def test_a_packed_row_with_segment_ids_gives_each_document_its_own_losses(changes):
  """Two documents (and padding) in one row with segment ids: every token's loss is the one it
  has when its document is a row alone, and with positions from 0 (learned positions too)."""
  model = _model(**changes)
  first, second = [1, 5, 6, 7, 8], [1, 9, 10, 11]  # BOS + tokens: what the model reads
  targets_first, targets_second = [5, 6, 7, 8, 2], [9, 10, 11, 2]  # the tokens + EOS
  packed = tf.constant([first + second + [0, 0, 0]])
  segments = tf.constant([[1] * 5 + [2] * 4 + [0] * 3])
  packed_targets = tf.constant([targets_first + targets_second + [0, 0, 0]])
  separate = tf.constant([first, [*second, 0]])
  separate_targets = tf.constant([targets_first, [*targets_second, 0]])

  def token_losses(logits, targets):
    return tf.nn.sparse_softmax_cross_entropy_with_logits(targets, logits).numpy()

  packed_losses = token_losses(model(packed, segment_ids=segments), packed_targets)[0]
  alone = token_losses(model(separate), separate_targets)
  np.testing.assert_allclose(packed_losses[:5], alone[0], atol=1e-5)
  np.testing.assert_allclose(packed_losses[5:9], alone[1, :4], atol=1e-5)
  # Without segment ids the second document sees the first: its losses differ.
  crossing = token_losses(model(packed), packed_targets)[0]
  assert np.abs(crossing[5:9] - alone[1, :4]).max() > 1e-4
