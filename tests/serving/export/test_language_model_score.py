"""The language model export's `score` signature: texts -> log-likelihood in total and per
token, the very computation of the training loss (unsmoothed), and one clear error for a text
too long to score at once. (Over REST and gRPC: tests/end_to_end/test_language_model_pipeline.)"""

import numpy as np
import pytest
import tensorflow as tf

import tfattn
from serving.export.modules import LanguageModelExport
from tfattn import text as tfattn_text
from tfattn.decode_options import DecodeOptions
from tfattn.language_model import LanguageModel
from train import kinds
from train import tokenizer as vocabulary


@pytest.fixture(scope="module")
def module(tmp_path_factory):
  words = tf.data.Dataset.from_tensor_slices(["the red cat sees the blue dog"] * 20)
  directory = tmp_path_factory.mktemp("vocab")
  tok = tfattn_text.load_tokenizer(
    vocabulary.learn_and_write(vocabulary.SENTENCEPIECE, words, 30, str(directory / "source"))
  )
  config = tfattn.TransformerConfig.preset(
    "tiny",
    source_vocab_size=tok.vocab_size,
    target_vocab_size=tok.vocab_size,
    num_decoder_layers=1,
    max_length=24,
  )
  return LanguageModelExport(LanguageModel(config), tok, DecodeOptions(strategy="greedy"))


def test_score_is_the_training_loss_of_each_text(module):
  """-log_prob of a text = the language model's training loss sum (label smoothing 0) over the
  batch of that text alone, [END] included; token_log_probs add up to it."""
  texts = ["the cat", "", "blue dog sees"]
  scored = module.score(tf.constant(texts))
  tokens = module.source_tokenizer.tokenize(tf.constant(texts))
  lm = kinds.of("language_model")
  for row, text in enumerate(texts):
    batch = {"source": tokens[row : row + 1].to_tensor()}
    loss = lm.loss_sums(module.model, batch, smoothing=0.0)
    assert int(scored["tokens"][row]) == int(loss.count) == len(tokens[row]) + 1, text
    np.testing.assert_allclose(-scored["log_prob"][row], loss.loss, rtol=1e-5, atol=1e-5)
  per_token = scored["token_log_probs"].numpy()
  np.testing.assert_allclose(per_token.sum(1), scored["log_prob"], rtol=1e-5, atol=1e-5)
  assert (per_token <= 0).all() and (per_token[1, 1:] == 0).all()  # "" is [END] alone


def test_a_text_longer_than_the_model_scores_at_once_is_refused(module):
  with pytest.raises(tf.errors.InvalidArgumentError, match="more pieces than this model scores"):
    module.score(tf.constant(["the red cat sees the blue dog " * 3]))
  with pytest.raises(tf.errors.InvalidArgumentError):
    module.score(tf.constant([b"\xff not utf-8"]))
