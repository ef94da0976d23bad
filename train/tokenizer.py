"""WordPiece tokenizers built with tensorflow-text, exportable inside a SavedModel.

Only ops that TF Serving <= 2.19 links (TF-Text 2.12.1) are used: CaseFoldUTF8, NormalizeUTF8,
RegexSplitWithOffsets, WordpieceTokenizeWithOffsets, plus TF core.
"""


import tensorflow as tf
import tensorflow_text as text
from tensorflow_text.tools.wordpiece_vocab import bert_vocab_from_dataset

from train.files import write_text_atomically

PAD, START, END, UNK = "[PAD]", "[START]", "[END]", "[UNK]"
RESERVED_TOKENS = [PAD, START, END, UNK]  # ids 0..3: pad_id, bos_id, eos_id, unknown
PAD_ID, START_ID, END_ID = 0, 1, 2

# Words are split at whitespace; punctuation, symbols and every single digit become their own
# words, so numbers are read digit by digit and generalise beyond the training vocabulary.
_SPLIT = r"\s+|[\p{P}\p{S}]|\p{N}"
_KEEP = r"[\p{P}\p{S}]|\p{N}"


def split_words(strings, lower_case=True):
  """`[batch]` strings -> ragged `[batch, (words)]` strings."""
  strings = text.normalize_utf8(strings, "NFKC")
  if lower_case:
    strings = text.case_fold_utf8(strings)
  return text.regex_split(strings, _SPLIT, _KEEP)


def learn_vocabulary(texts, vocab_size, lower_case=True, max_examples=200_000):
  """Learns a WordPiece vocabulary from a dataset of scalar strings (`bert_vocab_from_dataset`)."""
  words = texts.take(max_examples).batch(1024).map(
      lambda batch: tf.strings.reduce_join(split_words(batch, lower_case), axis=-1,
                                           separator=" "))
  return bert_vocab_from_dataset.bert_vocab_from_dataset(
      words.unbatch(), vocab_size=vocab_size, reserved_tokens=RESERVED_TOKENS,
      bert_tokenizer_params=dict(lower_case=False), learn_params={})


def write_vocabulary(vocab, path):
  """Writes one token a line, atomically."""
  write_text_atomically(path, "\n".join(vocab) + "\n")


class TextTokenizer(tf.Module):
  """Raw text <-> int32 token ids. The vocabulary file travels as a SavedModel asset."""

  def __init__(self, vocab_path, lower_case=True, name=None):
    super().__init__(name=name)
    with open(vocab_path, encoding="utf-8") as f:
      vocab = [line.rstrip("\n") for line in f]
    if vocab[:len(RESERVED_TOKENS)] != RESERVED_TOKENS:
      raise ValueError(f"{vocab_path}: a vocabulary must start with {RESERVED_TOKENS}")
    self.vocab_size = len(vocab)
    self.lower_case = lower_case
    self.vocab_file = tf.saved_model.Asset(vocab_path)
    self.vocab = tf.Variable(vocab, trainable=False, name="vocab")
    self._wordpiece = text.WordpieceTokenizer(vocab_path, token_out_type=tf.int64,
                                              unknown_token=UNK)

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
  def tokenize(self, strings):
    """`[batch]` strings -> ragged int32 `[batch, (tokens)]`, without START/END."""
    pieces = self._wordpiece.tokenize(split_words(strings, self.lower_case))
    return tf.cast(pieces.merge_dims(-2, -1), tf.int32)

  @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)])
  def detokenize(self, ids):
    """int32 `[batch, length]` -> `[batch]` strings; stops at END, drops PAD, START and END."""
    ended = tf.cumsum(tf.cast(tf.equal(ids, END_ID), tf.int32), axis=1) > 0
    keep = tf.logical_and(tf.logical_not(ended), ids > END_ID)  # [UNK] stays visible
    tokens = tf.gather(self.vocab, tf.ragged.boolean_mask(ids, keep))
    joined = tf.strings.reduce_join(tokens, axis=-1, separator=" ")
    return tf.strings.regex_replace(joined, " ##", "")
