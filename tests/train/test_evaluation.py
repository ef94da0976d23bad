"""train/evaluation.py: the language model's text units (characters and bytes its targets stand
for, nats per character, bits per byte) and partial evaluations, on hand-built data whose
answers are known."""

import math

import numpy as np
import pytest
import tensorflow as tf

import tfattn
from tfattn.special_ids import END_ID, PAD_ID, RESERVED_TOKENS, UNK_ID
from train import evaluation, kinds, tokenizer


class _Characters(tf.Module):
  """A character vocabulary of a few letters, one multi-byte character and an emoji: the
  detokenize interface of `tfattn.text` (stops at END, drops PAD, START, END), real TF ops."""

  PIECES = (*RESERVED_TOKENS, "a", "b", " ", "é", "😀")  # ids 4..8

  def __init__(self):
    super().__init__()
    self.pieces = tf.constant(self.PIECES)

  @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)], autograph=False)
  def detokenize(self, ids):
    visible = tfattn.text._visible_ids(ids)
    return tf.strings.reduce_join(tf.gather(self.pieces, visible), axis=-1)

  def ids(self, text):
    return [self.PIECES.index(c) for c in text]


def _targets(rows, length):
  return tf.constant([row + [PAD_ID] * (length - len(row)) for row in rows], tf.int32)


def test_characters_and_bytes_of_targets_with_ends_and_packed_rows():
  chars = _Characters()
  # Two lines, "ab é" and "😀a", as one stream cut into rows of 4 (a packed block's targets):
  # each END is the newline it stands for.
  stream = [*chars.ids("ab é"), END_ID, *chars.ids("😀a"), END_ID]
  rows = [stream[i : i + 4] for i in range(0, len(stream), 4)]
  characters, utf8_bytes = evaluation.target_characters(chars, _targets(rows, 4))
  assert float(characters) == len("ab é\n😀a\n") == 8
  assert float(utf8_bytes) == len("ab é\n😀a\n".encode()) == 12
  # One line per row, padded, as the line-per-example batches hold them; [UNK] counts one.
  rows = [[*chars.ids("é"), END_ID], [*chars.ids("ab"), UNK_ID, END_ID], [PAD_ID]]
  characters, utf8_bytes = evaluation.target_characters(chars, _targets(rows, 5))
  assert (float(characters), float(utf8_bytes)) == (2 + 4, 3 + 4)


def test_characters_of_sentencepiece_targets_are_the_texts_characters(tmp_path):
  """A real SentencePiece vocabulary: the count is the texts' own, whatever the pieces."""
  texts = ["the cat sees the dog", "Größe über Straße", "a"]
  learned = tfattn.text.load_tokenizer(
    tokenizer.learn_and_write(
      tokenizer.SENTENCEPIECE,
      tf.data.Dataset.from_tensor_slices(texts * 20),
      40,
      str(tmp_path / "vocab"),
    )
  )
  ids = learned.tokenize(tf.constant(texts)).to_list()
  targets = _targets([[*row, END_ID] for row in ids], max(map(len, ids)) + 1)
  characters, utf8_bytes = evaluation.target_characters(learned, targets)
  assert float(characters) == sum(len(t) + 1 for t in texts)
  assert float(utf8_bytes) == sum(len(t.encode()) + 1 for t in texts)
  # The same stream in blocks of 5 tokens (any cut of the pieces): the same count.
  stream = [token for row in ids for token in [*row, END_ID]]
  blocks = [stream[i : i + 5] for i in range(0, len(stream), 5)]
  assert float(evaluation.target_characters(learned, _targets(blocks, 5))[0]) == float(characters)


class _Uniform(tf.Module):
  """A language model that knows nothing: every next token equally likely (ln V nats)."""

  def __init__(self, vocab):
    super().__init__()
    self.vocab = vocab

  def __call__(self, ids, **kwargs):
    return tf.zeros([tf.shape(ids)[0], tf.shape(ids)[1], self.vocab])


def test_language_model_metrics_per_token_per_character_and_per_byte():
  chars = _Characters()
  vocab = len(chars.PIECES)
  texts = ["ab", "é😀", "a", "b a"]
  source = _targets([chars.ids(t) for t in texts], 3)
  batches = tf.data.Dataset.from_tensor_slices({"source": source}).batch(3)
  metrics = kinds.of("language_model").evaluate(
    _Uniform(vocab), batches, {"source": chars}, None, None
  )
  tokens = sum(len(t) + 1 for t in texts)  # each text's pieces and its END
  characters = sum(len(t) + 1 for t in texts)
  utf8_bytes = sum(len(t.encode()) + 1 for t in texts)
  nll = tokens * math.log(vocab)
  assert (metrics["tokens"], metrics["characters"], metrics["bytes"]) == (
    tokens,
    characters,
    utf8_bytes,
  )
  np.testing.assert_allclose(metrics["perplexity"], vocab, rtol=1e-5)
  np.testing.assert_allclose(metrics["nats_per_char"], nll / characters, rtol=1e-5)
  np.testing.assert_allclose(metrics["bits_per_byte"], nll / math.log(2) / utf8_bytes, rtol=1e-5)
  assert metrics["examples"] == 4 and metrics["partial"] is False


@pytest.mark.parametrize(
  "limit, seen, partial",
  [(None, 5, False), (5, 5, False), (6, 5, False), (4, 4, True), (2, 2, True), (3, 3, True)],
)
def test_first_examples_cuts_at_the_limit_and_says_whether_it_left_some_out(limit, seen, partial):
  batches = tf.data.Dataset.from_tensor_slices({"x": tf.range(5)}).batch(2)
  judged = evaluation.FirstExamples(batches, limit)
  rows = [int(x) for batch in judged for x in batch["x"].numpy()]
  assert rows == list(range(seen))
  assert judged.coverage() == {"examples": seen, "partial": partial}
  assert evaluation.coverage_note(judged.coverage()) == (
    f" (partial: the first {seen} examples)" if partial else ""
  )


def test_every_kind_marks_a_partial_evaluation():
  config = tfattn.TransformerConfig.preset(
    "tiny", source_vocab_size=30, target_vocab_size=30, num_encoder_layers=1, max_length=16
  )
  source = tf.constant([[5, 6, 7], [8, 9, 0], [4, 4, 4]], tf.int32)
  classified = tf.data.Dataset.from_tensor_slices(
    {"source": source, "label": tf.constant([0, 1, 0], tf.int64)}
  ).batch(2)
  classifier = tfattn.EncoderClassifier(config.replace(num_classes=2))
  for max_examples, partial in ((2, True), (None, False)):
    metrics = kinds.of("classification").evaluate(classifier, classified, {}, None, max_examples)
    assert (metrics["examples"], metrics["partial"]) == (2 if partial else 3, partial)
