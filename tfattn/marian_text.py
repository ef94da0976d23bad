"""The in-graph tokenizer of an imported Marian / OPUS-MT model: text <-> ids exactly as
transformers' `MarianTokenizer` (`models/marian/tokenization_marian.py`), with TF core and the
TF-Text ops TF Serving 2.12-2.19 links (RegexSplitWithOffsets, SentencepieceOp,
SentencepieceTokenizeOp).

A `.marian` file (JSON, written by `train.import_marian`) names the side's SentencePiece model
and vocabulary in the same folder:

  {"side": "source", "spm": "source.spm", "vocab": "vocab.json", "max_length": 512,
   "ids": [marian id of tfattn id 1, of tfattn id 2, ...], "special_tokens": ["</s>", ...],
   "unk_token": "<unk>", "eos_token": "</s>", "decode_spm": "source.spm",
   "clean_up_tokenization_spaces": false}

Ids are tfattn's: the import renumbers Marian's so that tfattn's reserved ids hold (PAD 0, a row
of its own; START 1 = Marian's pad, its decoder start; END 2 = `</s>`; UNK 3 = `<unk>`; the
other Marian ids keep their order from 4). `ids` lists, for tfattn ids 1.., the Marian id each
is, so `marian_ids(ids)` maps back.

Tokenizing (MarianTokenizer's `tokenize` then `build_inputs_with_special_tokens`): the special
tokens' literal text (`</s>`, `<unk>`, `<pad>`) is split out and kept whole (PreTrainedTokenizer's
added-token split); in each other part, a leading `>>xx<<` language token is kept whole and the
rest is encoded by SentencePiece into pieces; pieces map to ids through `vocab.json`, unknown
pieces to `<unk>`. A source gets `</s>` appended and keeps at most `max_length` ids with it
(`truncation=True` at `model_max_length`: the first max_length - 1, then `</s>`); a target gets
none (the training data appends END).

Detokenizing (`batch_decode(ids, skip_special_tokens=True)`): special ids dropped wherever they
are, the others' pieces joined, "▁" -> " ", whitespace stripped as Python's `str.strip`
strips it (and transformers' clean-up when the tokenizer config asks for it).
"""

import json
import os
from typing import List, Optional

import numpy as np
import tensorflow as tf
import tensorflow_text as text

from tfattn import text as tfattn_text
from tfattn.special_ids import END_ID, PAD_ID, UNK_ID

MARIAN_SUFFIX = tfattn_text.MARIAN_SUFFIX
SPIECE_UNDERLINE = "\u2581"
# The characters Python's str.isspace() calls whitespace (what `str.strip` strips).
_PYTHON_WHITESPACE = (
  "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
  "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
_STRIP = "^[{0}]+|[{0}]+$".format(_PYTHON_WHITESPACE)
# transformers' `clean_up_tokenization` (tokenization_utils_base.py), in its order.
CLEAN_UP = (
  (" .", "."),
  (" ?", "?"),
  (" !", "!"),
  (" ,", ","),
  (" ' ", "'"),
  (" n't", "n't"),
  (" 'm", "'m"),
  (" 's", "'s"),
  (" 've", "'ve"),
  (" 're", "'re"),
)


def _escape(literal: str) -> str:
  """A literal string as an RE2 pattern."""
  return "".join("\\" + c if not c.isalnum() and ord(c) < 128 else c for c in literal)


def read_spec(path: str) -> dict:
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def _read_vocab(spec_path: str, spec: dict) -> dict:
  """The side's `vocab.json`: piece -> Marian id."""
  with open(os.path.join(os.path.dirname(spec_path), spec["vocab"]), encoding="utf-8") as f:
    return json.load(f)


def pieces_of(spec_path: str) -> List[str]:
  """The piece of every tfattn id of a `.marian` file's side ("" for PAD, a row of tfattn's own):
  the vocabulary as `vocab.json` orders it under tfattn's numbering."""
  spec = read_spec(spec_path)
  piece_of = {int(i): piece for piece, i in _read_vocab(spec_path, spec).items()}
  return [""] + [piece_of[int(marian)] for marian in spec["ids"]]


class MarianTokenizer(tf.Module):
  """MarianTokenizer in the graph: `tokenize`, `detokenize`, `vocab_size` (see the module
  docstring); the SentencePiece model travels as a SavedModel asset.

  Args:
    spec_path: a `.marian` file.
    name: module name.
  """

  def __init__(self, spec_path: str, name: Optional[str] = None):
    super().__init__(name=name)
    folder = os.path.dirname(spec_path)
    spec = read_spec(spec_path)
    self.side = spec["side"]
    self.max_length = int(spec["max_length"])
    self.spec_path = spec_path
    vocab = _read_vocab(spec_path, spec)  # piece -> Marian id
    marian_ids = [int(i) for i in spec["ids"]]  # Marian id of tfattn ids 1..
    self.vocab_size = 1 + len(marian_ids)
    tfattn_id = {marian: index + 1 for index, marian in enumerate(marian_ids)}
    pieces = pieces_of(spec_path)
    self._marian_ids = np.array([-1, *marian_ids], np.int64)
    keys = [piece for piece, _ in sorted(vocab.items(), key=lambda item: item[1])]
    values = [tfattn_id[int(vocab[piece])] for piece in keys]
    self._piece_ids = tf.lookup.StaticHashTable(
      tf.lookup.KeyValueTensorInitializer(
        tf.constant(keys, tf.string), tf.constant(values, tf.int32)
      ),
      default_value=UNK_ID,
    )
    self._specials = list(spec["special_tokens"])
    self._special_pattern = "|".join(
      _escape(token) for token in sorted(self._specials, key=len, reverse=True)
    )
    # What each tfattn id detokenizes to: its piece, "" for the special ids and pieces the
    # decoding SentencePiece model calls control symbols (which it decodes to nothing).
    skipped = {tfattn_id[int(vocab[token])] for token in self._specials if token in vocab}
    skipped |= {PAD_ID}
    hidden = set(spec.get("control_pieces", ()))
    self._surfaces = tf.constant(
      ["" if i in skipped or piece in hidden else piece for i, piece in enumerate(pieces)]
    )
    self._visible = tf.constant([i not in skipped for i in range(len(pieces))])
    self.clean_up = bool(spec.get("clean_up_tokenization_spaces", False))
    self.appends_end = self.side == "source"
    spm_path = os.path.join(folder, spec["spm"])
    with open(spm_path, "rb") as f:
      model = f.read()
    self.model_file = tf.saved_model.Asset(spm_path)
    self._sentencepiece = text.SentencepieceTokenizer(model=model, out_type=tf.string)
    self._sentencepiece._model_resource = tfattn_text._SentencePieceModel(model)  # pylint: disable=protected-access

  def marian_ids(self, ids):
    """tfattn ids (numpy, any shape) -> Marian's own ids (-1 for PAD)."""
    return self._marian_ids[np.asarray(ids, np.int64)]

  def _chunk_ids(self, chunks):
    """flat strings `[chunks]` -> ragged int32 `[chunks, (ids)]`: a special token's id, or a
    leading language token's id and the rest's pieces' ids."""
    special = tf.zeros_like(chunks, tf.bool)
    for token in self._specials:
      special |= tf.equal(chunks, token)
    has_code = tf.strings.regex_full_match(chunks, "(?s)>>.*?<<.*")
    code = tf.strings.regex_replace(chunks, "(?s)^(>>.*?<<).*$", r"\1")
    rest = tf.where(has_code, tf.strings.regex_replace(chunks, "(?s)^>>.*?<<", ""), chunks)
    pieces = self._sentencepiece.tokenize(rest)  # ragged [chunks, (pieces)] strings
    piece_ids = tf.ragged.map_flat_values(self._piece_ids.lookup, pieces)
    code_ids = tf.RaggedTensor.from_row_lengths(
      tf.boolean_mask(self._piece_ids.lookup(code), has_code),
      tf.cast(has_code, tf.int64),
      validate=False,
    )
    normal = tf.concat([code_ids, piece_ids], axis=1)  # [chunks, (ids)]
    keep = tf.repeat(tf.logical_not(special), normal.row_lengths())
    normal = tf.RaggedTensor.from_row_lengths(
      tf.boolean_mask(normal.flat_values, keep),
      tf.where(special, tf.zeros_like(normal.row_lengths()), normal.row_lengths()),
      validate=False,
    )
    special_ids = tf.RaggedTensor.from_row_lengths(
      tf.boolean_mask(self._piece_ids.lookup(chunks), special),
      tf.cast(special, tf.int64),
      validate=False,
    )
    return tf.concat([normal, special_ids], axis=1)  # one of the two is empty in each row

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
  def tokenize(self, strings):
    """`[batch]` strings -> ragged int32 `[batch, (ids)]` (tfattn ids); a source's end with
    END (`</s>`) and hold at most max_length ids."""
    if self._special_pattern:
      chunks = text.regex_split(strings, self._special_pattern, self._special_pattern)
    else:
      chunks = tf.RaggedTensor.from_row_lengths(
        strings, tf.ones_like(strings, tf.int64), validate=False
      )
    ids = tf.RaggedTensor.from_row_splits(
      self._chunk_ids(chunks.flat_values), chunks.row_splits, validate=False
    )
    ids = ids.merge_dims(1, 2)  # [batch, (ids)]
    if not self.appends_end:
      return ids
    end = tf.fill([ids.nrows(), 1], tf.constant(END_ID, tf.int32))
    return tf.concat([ids[:, : self.max_length - 1], end], axis=1)

  @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)], autograph=False)
  def detokenize(self, ids):
    """int32 `[batch, length]` tfattn ids -> `[batch]` strings, as batch_decode(ids,
    skip_special_tokens=True): the special ids (END, PAD, START, UNK) are dropped wherever they
    are (a search's output ends with END, then PAD: the same as stopping at END)."""
    pieces = tf.ragged.boolean_mask(tf.gather(self._surfaces, ids), tf.gather(self._visible, ids))
    joined = tf.strings.reduce_join(pieces, axis=-1)
    joined = tf.strings.regex_replace(joined, SPIECE_UNDERLINE, " ")
    joined = tf.strings.regex_replace(joined, _STRIP, "")
    if self.clean_up:
      for before, after in CLEAN_UP:
        joined = tf.strings.regex_replace(joined, _escape(before), after)
    return joined


def write_spec(path: str, spec: dict) -> None:
  """Writes a `.marian` file (atomically: a temporary file renamed into place)."""
  temporary = path + ".tmp"
  with open(temporary, "w", encoding="utf-8") as f:
    json.dump(spec, f, indent=2, ensure_ascii=False)
  os.replace(temporary, path)


def special_tokens_of(tokenizer_config: dict) -> List[str]:
  """The tokens transformers splits out of a text and skips when decoding: unk, eos and pad
  (and any additional special tokens the tokenizer config names)."""
  tokens = [
    tokenizer_config.get(key, default)
    for key, default in (("eos_token", "</s>"), ("unk_token", "<unk>"), ("pad_token", "<pad>"))
  ]
  tokens += list(tokenizer_config.get("additional_special_tokens") or ())
  return [t["content"] if isinstance(t, dict) else t for t in tokens]
