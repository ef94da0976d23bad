"""train/evaluation.py: the language model's text units (characters and bytes its targets stand
for, nats per character, bits per byte) and partial evaluations, on hand-built data whose
answers are known."""

import gc
import math
import weakref

import numpy as np
import pytest
import tensorflow as tf

import tfattn
from tfattn.decode_options import DecodeOptions
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


def _Greedy():
  """The decoding options a sequence-to-sequence evaluation reads."""
  return DecodeOptions(strategy="greedy", max_decode_length=4)


def test_every_kind_traces_its_evaluation_once_per_model_and_reads_its_weights_now():
  """A run evaluates every --eval_every steps: each kind's evaluation functions are traced once
  per model (not once per call), yet judge the weights as they are at each call; another model
  gets its own, and the cache keeps no model alive."""
  chars = _Characters()  # ids 0..8: the detokenizer of every model's outputs
  tokenizers = {"source": chars, "target": chars}
  config = tfattn.TransformerConfig.preset(
    "tiny", source_vocab_size=9, target_vocab_size=9, num_encoder_layers=1, max_length=16
  )
  source = tf.constant([[5, 6, 7], [8, 5, 0], [4, 4, 4]], tf.int32)

  def batches(**fields):
    return lambda: tf.data.Dataset.from_tensor_slices({"source": source, **fields}).batch(2)

  judged = {  # kind: (its model, its batches)
    "classification": (
      lambda: tfattn.EncoderClassifier(config.replace(num_classes=2)),
      batches(label=tf.constant([0, 1, 0], tf.int64)),
    ),
    "language_model": (
      lambda: tfattn.LanguageModel(config.replace(num_encoder_layers=0)),
      batches(),
    ),
    "seq2seq": (
      lambda: tfattn.Transformer(config),
      batches(
        target_in=tf.constant([[1, 5, 6], [1, 8, 0], [1, 4, 4]], tf.int32),
        target_out=tf.constant([[5, 6, 2], [8, 2, 0], [4, 4, 2]], tf.int32),
        target_text=tf.constant(["ab", "é", "aa"]),
      ),
    ),
  }
  for name, (make_model, make_batches) in judged.items():
    kind = kinds.of(name)
    model = make_model()
    kind.evaluate(model, make_batches(), tokenizers, _Greedy(), None)
    first = evaluation.traced_functions(model)
    for variable in model.variables:  # uniform predictions from here on
      variable.assign(tf.zeros_like(variable))
    # New batches of the same element spec, as each --eval_every evaluation makes.
    metrics = kind.evaluate(model, make_batches(), tokenizers, _Greedy(), 3)
    traced = evaluation.traced_functions(model)
    assert traced and traced == first, f"{name}: the second evaluation built new functions"
    for key, function in traced.items():
      assert function.experimental_get_tracing_count() == 1, (name, key)
    if name == "language_model":  # the zeroed weights, not the first call's
      np.testing.assert_allclose(metrics["perplexity"], 9, rtol=1e-5)
    elif name == "classification":  # all logits equal: class 0, right for 2 of 3
      assert metrics["accuracy"] == pytest.approx(2 / 3)
    else:  # all logits equal: PAD everywhere, never a target token
      assert metrics["token_accuracy"] == 0.0
    alive = weakref.ref(model)
    del model
    gc.collect()
    assert alive() is None, f"{name}: the evaluation cache kept a model alive"

  # Another model gets functions of its own (the cache is keyed by the model), which judge its
  # weights, not the first model's.
  make_model, make_batches = judged["language_model"]
  zeroed, other = make_model(), make_model()
  for variable in zeroed.variables:
    variable.assign(tf.zeros_like(variable))
  language_model = kinds.of("language_model")
  perplexities = [
    language_model.evaluate(model, make_batches(), tokenizers, None, None)["perplexity"]
    for model in (zeroed, other)
  ]
  np.testing.assert_allclose(perplexities[0], 9, rtol=1e-5)
  assert abs(perplexities[1] - 9) > 1e-3, perplexities  # a random model is not uniform
  (mine,), (theirs,) = (evaluation.traced_functions(m).values() for m in (zeroed, other))
  assert mine is not theirs
