"""tfattn/scoring.py: each text's tokens and then [END] scored under the model, against numpy's
log-softmax of the model's own logits."""

import numpy as np
import tensorflow as tf

import tfattn
from tfattn import scoring
from tfattn.special_ids import END_ID, START_ID


def test_token_log_likelihoods_are_the_next_token_log_probabilities():
  config = tfattn.TransformerConfig.preset(
    "tiny", source_vocab_size=20, target_vocab_size=20, num_decoder_layers=1, max_length=8
  )
  model = tfattn.LanguageModel(config)
  tokens = tf.constant([[5, 6, 7], [8, 0, 0], [0, 0, 0]], tf.int32)  # the last text is ""
  log_probs, counts = scoring.token_log_likelihoods(model, tokens)
  assert list(counts.numpy()) == [4, 2, 1]
  for row, text in enumerate([[5, 6, 7], [8], []]):
    inputs = tf.constant([[START_ID, *text]], tf.int32)
    logits = model(inputs).numpy()[0].astype(np.float64)
    reference = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    expected = [reference[i, token] for i, token in enumerate([*text, END_ID])]
    np.testing.assert_allclose(log_probs[row, : len(expected)], expected, rtol=1e-5, atol=1e-5)
    assert (log_probs[row, len(expected) :].numpy() == 0).all()
