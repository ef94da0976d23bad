"""train/kinds.py: the language model's evaluation runs the model once per batch."""

import tensorflow as tf

import tfattn
from train import kinds


class _Counting(tf.Module):
  """A model that counts its calls as they are traced into the evaluation's graph."""

  def __init__(self, model):
    super().__init__()
    self.model, self.calls = model, 0

  def __call__(self, ids, **kwargs):
    self.calls += 1
    return self.model(ids, **kwargs)


class _Pieces(tf.Module):
  """A tokenizer whose every piece is one character, "x" (enough to count characters)."""

  @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)], autograph=False)
  def detokenize(self, ids):
    return tf.strings.reduce_join(tf.where(ids > 3, "x", ""), axis=-1)


def test_language_model_evaluation_calls_the_model_once_per_batch():
  config = tfattn.TransformerConfig.preset(
    "tiny", source_vocab_size=30, target_vocab_size=30, num_encoder_layers=0, max_length=16
  )
  model = _Counting(tfattn.LanguageModel(config))
  batches = tf.data.Dataset.from_tensor_slices(
    {"source": tf.constant([[5, 6, 7], [8, 9, 0], [4, 4, 4], [3, 0, 0]], tf.int32)}
  ).batch(2)
  metrics = kinds.of("language_model").evaluate(model, batches, {"source": _Pieces()}, None, None)
  assert model.calls == 1  # one trace of one call, reused by both batches
  assert metrics["examples"] == 4 and metrics["tokens"] == 9 + 4  # 3+2+3+1 tokens, 4 EOS
  assert metrics["perplexity"] > 1.0 and 0.0 <= metrics["token_accuracy"] <= 1.0
  assert metrics["characters"] == 9 + 4  # a character a piece, a newline an END
