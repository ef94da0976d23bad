"""In-graph tokenizers: raw text <-> int32 token ids, exportable inside a SavedModel.

Four kinds, one interface (`tokenize`, `detokenize`, `vocab_size`), told apart by the suffix of
their vocabulary file:

* `SentencePieceTokenizer` (`.model`, the default): lossless. A SentencePiece model trained
  with whitespace kept as it is, no dummy prefix and byte fallback gives
  detokenize(tokenize(s)) == NFKC(s), case, spacing and punctuation included.
* `WordPieceTokenizer` (`.txt`): NFKC + (optional) case fold, split at whitespace, punctuation
  and each digit, then WordPiece; detokenized text is the pieces joined with spaces (lossy).
* `CharacterTokenizer` (`.chars`): one id per Unicode character of a vocabulary learned from
  text; detokenize(tokenize(s)) == s exactly (no normalization, newlines included) when every
  character of s is in the vocabulary, and a character that is not becomes [UNK].
* `ByteTokenizer` (`.bytes`): one id per UTF-8 byte, 256 + the reserved ids, no [UNK]:
  detokenize(tokenize(s)) == s for every text.

Only ops that TF Serving <= 2.19 links (TF-Text 2.12.1) are used: SentencepieceOp,
SentencepieceTokenizeOp, SentencepieceDetokenizeOp, CaseFoldUTF8, NormalizeUTF8,
RegexSplitWithOffsets, WordpieceTokenizeWithOffsets, plus TF core (the character and byte
tokenizers use TF core only: UnicodeDecode, UnicodeEncode, UnicodeTranscode, StringSplit,
DecodeRaw, LowerBound).
"""

import hashlib
import os
from typing import Optional

import numpy as np
import tensorflow as tf
import tensorflow_text as text
from tensorflow_text.python.ops.sentencepiece_tokenizer import gen_sentencepiece_tokenizer

# Special tokens (defined in special_ids.py), re-exported for the tokenizer's users.
from tfattn.special_ids import (  # noqa: F401
  END,
  END_ID,
  PAD,
  PAD_ID,
  RESERVED_TOKENS,
  START,
  START_ID,
  UNK,
  UNK_ID,
)

SENTENCEPIECE_SUFFIX, WORDPIECE_SUFFIX = ".model", ".txt"
CHARACTER_SUFFIX, BYTE_SUFFIX = ".chars", ".bytes"
# An imported Marian / OPUS-MT model's tokenizer (`tfattn.marian_text`): a JSON file naming its
# SentencePiece model and vocabulary.
MARIAN_SUFFIX = ".marian"
# What [UNK] detokenizes to in the character and byte vocabularies: U+FFFD REPLACEMENT CHARACTER.
REPLACEMENT_CHARACTER = 0xFFFD

# WordPiece words: split at whitespace; punctuation, symbols and every single digit become
# their own words, so numbers are read digit by digit and generalise beyond the vocabulary.
_SPLIT = r"\s+|[\p{P}\p{S}]|\p{N}"
_KEEP = r"[\p{P}\p{S}]|\p{N}"


def split_words(strings, lower_case=True):
  """`[batch]` strings -> ragged `[batch, (words)]` strings (WordPiece pre-tokenization)."""
  strings = text.normalize_utf8(strings, "NFKC")
  if lower_case:
    strings = text.case_fold_utf8(strings)
  return text.regex_split(strings, _SPLIT, _KEEP)


def _visible_ids(ids):
  """int32 `[batch, length]` -> ragged ids before the first END, without PAD/START/END."""
  ended = tf.cumsum(tf.cast(tf.equal(ids, END_ID), tf.int32), axis=1) > 0
  keep = tf.logical_and(tf.logical_not(ended), ids > END_ID)  # [UNK] stays visible
  return tf.ragged.boolean_mask(ids, keep)


class _SentencePieceModel(tf.saved_model.experimental.TrackableResource):
  """The SentencePiece model as a resource with a name of its own.

  TF-Text creates it with an empty shared_name: when one SavedModel holds two SentencePiece
  models (source and target), the restored copies then share one resource and both sides
  tokenize with the same model (seen with TF-Text 2.21). Naming the resource by a digest of
  the model keeps different models apart and lets identical ones share."""

  def __init__(self, model: bytes):
    self._model = model
    self._shared_name = "tfattn_sentencepiece_" + hashlib.sha256(model).hexdigest()[:24]
    super().__init__()
    _ = self.resource_handle  # creates the resource now

  def _create_resource(self):
    return gen_sentencepiece_tokenizer.sentencepiece_op(
      model=self._model, shared_name=self._shared_name
    )


class SentencePieceTokenizer(tf.Module):
  """Lossless subword tokenizer; the `.model` file travels as a SavedModel asset.

  Args:
    model_path: a SentencePiece model whose ids 0..3 are PAD, START, END, UNK.
    name: module name.
  """

  def __init__(self, model_path: str, name: Optional[str] = None):
    super().__init__(name=name)
    with open(model_path, "rb") as f:
      model = f.read()
    self.model_file = tf.saved_model.Asset(model_path)
    self._sentencepiece = text.SentencepieceTokenizer(model=model, out_type=tf.int32)
    self._sentencepiece._model_resource = _SentencePieceModel(model)  # pylint: disable=protected-access
    self.vocab_size = int(self._sentencepiece.vocab_size())
    reserved = [
      piece.decode()
      for piece in self._sentencepiece.id_to_string(tf.range(len(RESERVED_TOKENS))).numpy()
    ]
    if reserved != list(RESERVED_TOKENS):
      raise ValueError(f"{model_path}: ids 0..3 must be {list(RESERVED_TOKENS)}, got {reserved}")

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
  def tokenize(self, strings):
    """`[batch]` strings -> ragged int32 `[batch, (tokens)]`, without START/END."""
    return self._sentencepiece.tokenize(strings)

  @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)], autograph=False)
  def detokenize(self, ids):
    """int32 `[batch, length]` -> `[batch]` strings; stops at END, drops PAD, START and END."""
    return self._sentencepiece.detokenize(_visible_ids(ids))


class WordPieceTokenizer(tf.Module):
  """WordPiece over split words; the vocabulary file travels as a SavedModel asset.

  Args:
    vocab_path: one token a line, starting with `RESERVED_TOKENS`.
    lower_case: case-fold before splitting (must match how the vocabulary was learned).
    name: module name.
  """

  def __init__(self, vocab_path: str, lower_case: bool = True, name: Optional[str] = None):
    super().__init__(name=name)
    with open(vocab_path, encoding="utf-8") as f:
      vocab = [line.rstrip("\n") for line in f]
    if tuple(vocab[: len(RESERVED_TOKENS)]) != RESERVED_TOKENS:
      raise ValueError(f"{vocab_path}: a vocabulary must start with {list(RESERVED_TOKENS)}")
    self.vocab_size = len(vocab)
    self.lower_case = lower_case
    self.vocab_file = tf.saved_model.Asset(vocab_path)
    self.vocab = tf.Variable(vocab, trainable=False, name="vocab")
    self._wordpiece = text.WordpieceTokenizer(
      vocab_path, token_out_type=tf.int64, unknown_token=UNK
    )

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
  def tokenize(self, strings):
    """`[batch]` strings -> ragged int32 `[batch, (tokens)]`, without START/END."""
    pieces = self._wordpiece.tokenize(split_words(strings, self.lower_case))
    return tf.cast(pieces.merge_dims(-2, -1), tf.int32)

  @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)], autograph=False)
  def detokenize(self, ids):
    """int32 `[batch, length]` -> `[batch]` strings; stops at END, drops PAD, START and END."""
    tokens = tf.gather(self.vocab, _visible_ids(ids))
    joined = tf.strings.reduce_join(tokens, axis=-1, separator=" ")
    return tf.strings.regex_replace(joined, " ##", "")


def character_line(code_point: int) -> str:
  """A character's line in a `.chars` vocabulary: `U+000A` (a newline or a space would not
  survive as a line of its own)."""
  return f"U+{code_point:04X}"


def _vocabulary_lines(path: str):
  """The lines of a vocabulary file after its reserved tokens (checked)."""
  with open(path, encoding="utf-8") as f:
    lines = [line.rstrip("\n") for line in f]
  if tuple(lines[: len(RESERVED_TOKENS)]) != RESERVED_TOKENS:
    raise ValueError(f"{path}: a vocabulary must start with {list(RESERVED_TOKENS)}")
  return lines[len(RESERVED_TOKENS) :]


class CharacterTokenizer(tf.Module):
  """One id per Unicode character; the `.chars` file travels as a SavedModel asset.

  Ids 4.. are the vocabulary's characters in code point order, so an id is found by a binary
  search (`tf.searchsorted`) over the sorted code points: no lookup table, no resource.

  Args:
    vocab_path: the reserved tokens, then one `U+XXXX` code point a line, ascending.
    name: module name.
  """

  def __init__(self, vocab_path: str, name: Optional[str] = None):
    super().__init__(name=name)
    lines = _vocabulary_lines(vocab_path)
    try:
      code_points = [int(line[2:], 16) for line in lines if line.startswith("U+")]
    except ValueError:
      code_points = []
    if not lines or len(code_points) != len(lines) or code_points != sorted(set(code_points)):
      raise ValueError(
        f"{vocab_path}: expected one U+XXXX character a line, ascending, after the reserved tokens"
      )
    self.vocab_file = tf.saved_model.Asset(vocab_path)
    self._code_points = np.array(code_points, np.int32)  # [characters], ascending
    self.vocab_size = len(RESERVED_TOKENS) + len(code_points)

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
  def tokenize(self, strings):
    """`[batch]` strings -> ragged int32 `[batch, (characters)]`, without START/END; a character
    outside the vocabulary (or a malformed UTF-8 sequence) is UNK_ID."""
    characters = tf.strings.unicode_decode(strings, "UTF-8", errors="replace")
    flat = characters.flat_values  # int32 [characters]
    known = tf.constant(self._code_points)  # [characters], ascending
    index = tf.searchsorted(known, flat, side="left")
    found = tf.equal(tf.gather(known, tf.minimum(index, len(self._code_points) - 1)), flat)
    ids = tf.where(found, index + len(RESERVED_TOKENS), UNK_ID)
    return characters.with_flat_values(ids)

  @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)], autograph=False)
  def detokenize(self, ids):
    """int32 `[batch, length]` -> `[batch]` strings; stops at END, drops PAD, START and END;
    UNK_ID becomes U+FFFD."""
    reserved = [0] * UNK_ID + [REPLACEMENT_CHARACTER]
    by_id = tf.constant(np.concatenate([reserved, self._code_points]), tf.int32)  # [vocab_size]
    return tf.strings.unicode_encode(tf.gather(by_id, _visible_ids(ids)), "UTF-8")


def byte_vocabulary() -> list:
  """The lines of every `.bytes` vocabulary: the reserved tokens, then `0x00` .. `0xFF`."""
  return list(RESERVED_TOKENS) + [f"0x{value:02X}" for value in range(256)]


class ByteTokenizer(tf.Module):
  """One id per UTF-8 byte (id = 4 + the byte's value): any text, no [UNK]. The `.bytes` file
  (always the same 260 lines) travels as a SavedModel asset and names the kind.

  Args:
    vocab_path: a `.bytes` vocabulary (`byte_vocabulary()`'s lines).
    name: module name.
  """

  def __init__(self, vocab_path: str, name: Optional[str] = None):
    super().__init__(name=name)
    with open(vocab_path, encoding="utf-8") as f:
      lines = [line.rstrip("\n") for line in f]
    if lines != byte_vocabulary():
      raise ValueError(
        f"{vocab_path}: a byte vocabulary is {list(RESERVED_TOKENS)} then 0x00 .. 0xFF, a line each"
      )
    self.vocab_file = tf.saved_model.Asset(vocab_path)
    self.vocab_size = len(lines)

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
  def tokenize(self, strings):
    """`[batch]` strings -> ragged int32 `[batch, (bytes)]`, without START/END."""
    single_bytes = tf.strings.bytes_split(strings)  # ragged [batch, (bytes)] of 1-byte strings
    values = tf.reshape(tf.io.decode_raw(single_bytes.flat_values, tf.uint8), [-1])
    return single_bytes.with_flat_values(tf.cast(values, tf.int32) + len(RESERVED_TOKENS))

  @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)], autograph=False)
  def detokenize(self, ids):
    """int32 `[batch, length]` -> `[batch]` strings; stops at END, drops PAD, START and END.
    Bytes that do not form UTF-8 (a model can write any) become U+FFFD, so the output is
    always valid UTF-8 (a JSON answer needs it); valid text comes back unchanged."""
    by_id = tf.constant(
      [b""] * UNK_ID + [chr(REPLACEMENT_CHARACTER).encode()] + [bytes([v]) for v in range(256)]
    )  # [vocab_size]
    joined = tf.strings.reduce_join(tf.gather(by_id, _visible_ids(ids)), axis=-1)
    return tf.strings.unicode_transcode(
      joined, "UTF-8", "UTF-8", errors="replace", replace_control_characters=False
    )


def truncate_tokens(ragged, max_length, side="right"):
  """Ragged `[batch, (tokens)]` -> at most max_length tokens a row: "right" drops the end
  (keeps the first tokens), "left" drops the beginning (keeps the last tokens)."""
  if side == "left":
    return ragged[:, -max_length:]
  return ragged[:, :max_length]


def row_lengths(ids):
  """int32 `[batch, length]` padded with PAD -> int32 `[batch]`: up to the last real token."""
  positions = tf.range(1, tf.shape(ids)[1] + 1)[tf.newaxis]  # [1, length]
  last = tf.reduce_max(tf.where(tf.not_equal(ids, PAD_ID), positions, 0), axis=1)
  return tf.maximum(last, 0)  # a zero-width batch (all texts empty) has max -2^31


def piece_texts(tokenizer, ids, lengths):
  """int32 `[batch, length]` -> string `[batch, length]`: each id's own text as the tokenizer
  detokenizes it alone (so a SentencePiece row joins back into its text), reserved ids by
  name ("[END]"), "" past `lengths` (int32 `[batch]`)."""
  flat = tf.reshape(ids, [-1])
  texts = tokenizer.detokenize(flat[:, tf.newaxis])  # [batch * length]
  reserved = tf.constant(RESERVED_TOKENS)
  is_reserved = flat < len(RESERVED_TOKENS)
  texts = tf.where(is_reserved, tf.gather(reserved, tf.where(is_reserved, flat, 0)), texts)
  valid = tf.sequence_mask(lengths, tf.shape(ids)[1])
  return tf.where(valid, tf.reshape(texts, tf.shape(ids)), "")


def _marian_tokenizer(path: str):
  from tfattn.marian_text import MarianTokenizer  # it builds on this module

  return MarianTokenizer(path)


# Each vocabulary file's suffix -> the tokenizer that reads it.
TOKENIZER_BY_SUFFIX = {
  SENTENCEPIECE_SUFFIX: SentencePieceTokenizer,
  WORDPIECE_SUFFIX: WordPieceTokenizer,
  CHARACTER_SUFFIX: CharacterTokenizer,
  BYTE_SUFFIX: ByteTokenizer,
  MARIAN_SUFFIX: _marian_tokenizer,
}


def tokenizer_path(vocab_dir: str, side: str) -> str:
  """The vocabulary file of `side` ("source" or "target") in `vocab_dir`, whichever kind."""
  for suffix in TOKENIZER_BY_SUFFIX:
    path = os.path.join(vocab_dir, side + suffix)
    if os.path.exists(path):
      return path
  raise ValueError(
    f"{vocab_dir} holds no {side} vocabulary "
    f"({' or '.join(side + suffix for suffix in TOKENIZER_BY_SUFFIX)})"
  )


def load_tokenizer(path: str):
  """A tokenizer from its file: `.model` -> SentencePiece (its normalization, case folding
  included, is inside the model), `.txt` -> WordPiece (always case-folded), `.chars` ->
  characters, `.bytes` -> UTF-8 bytes (both exact: no normalization, no case folding)."""
  for suffix, tokenizer in TOKENIZER_BY_SUFFIX.items():
    if path.endswith(suffix):
      return tokenizer(path)
  raise ValueError(f"{path}: not a vocabulary file ({', '.join(TOKENIZER_BY_SUFFIX)})")
