"""Learning vocabularies for the in-graph tokenizers of `tfattn.text`.

SentencePiece (default): the `sentencepiece` package's trainer, configured to be lossless
(NFKC, whitespace kept, no dummy prefix, digits split, byte fallback from 512 pieces). WordPiece:
`bert_vocab_from_dataset` over `tfattn.text.split_words`. Characters: the text's characters,
the most frequent `vocab_size - 4` kept. Bytes: nothing to learn (the 256 byte values).

Learning says, in one line, how many characters of the text it learned from the vocabulary maps
to [UNK] (and the commonest of them): a SentencePiece vocabulary below 512 pieces has no byte
fallback, and a character vocabulary keeps at most `vocab_size - 4` characters.
"""

import collections
import io
import itertools
import re
import time

import tensorflow as tf
from absl import logging

from tfattn import text
from train.files import write_bytes_atomically, write_text_atomically
from train.flag_choices import BYTE, CHARACTER, SENTENCEPIECE, TOKENIZERS, WORDPIECE

# Byte fallback spends 256 ids on raw bytes: only worth it (and possible) in larger vocabularies.
_BYTE_FALLBACK_MIN_VOCAB = 512
# SentencePiece's own default: the rarest 0.05% of the text's characters get no piece of their
# own (byte fallback spells them, below 512 pieces they are [UNK], and the learning says so).
DEFAULT_CHARACTER_COVERAGE = 0.9995
# Unknown characters named in the learning's report.
_NAMED_UNKNOWN = 5
_SUFFIXES = {
  SENTENCEPIECE: text.SENTENCEPIECE_SUFFIX,
  WORDPIECE: text.WORDPIECE_SUFFIX,
  CHARACTER: text.CHARACTER_SUFFIX,
  BYTE: text.BYTE_SUFFIX,
}


def _strings(texts, max_examples):
  """The first `max_examples` of a dataset of scalar strings, or of a sequence of bytes."""
  if isinstance(texts, tf.data.Dataset):
    texts = texts.take(max_examples).as_numpy_iterator()
  for value in itertools.islice(texts, max_examples):
    yield value.decode("utf-8")


def _counting(strings, counts: collections.Counter):
  """Yields `strings`, adding each one's characters to `counts` on the way."""
  for string in strings:
    counts.update(string)
    yield string


def learn_sentencepiece(
  texts,
  vocab_size,
  lower_case=False,
  max_examples=200_000,
  character_coverage=DEFAULT_CHARACTER_COVERAGE,
  counts=None,
):
  """Trains a SentencePiece unigram model on a dataset of scalar strings; returns its bytes.

  Ids 0..3 are PAD, START, END, UNK. The vocabulary may come out smaller than `vocab_size`
  when the text has fewer distinct pieces (tiny synthetic tasks). `counts` (a Counter), when
  given, receives the characters of the text learned from. A `vocab_size` too small for the
  text's characters raises one ValueError line."""
  model = io.BytesIO()
  import sentencepiece  # imported lazily: only learning needs the package, not the export

  if character_coverage is None:  # a configuration not resolved yet
    character_coverage = DEFAULT_CHARACTER_COVERAGE
  strings = _strings(texts, max_examples)
  byte_fallback = vocab_size >= _BYTE_FALLBACK_MIN_VOCAB
  try:
    sentencepiece.SentencePieceTrainer.train(
      sentence_iterator=strings if counts is None else _counting(strings, counts),
      model_writer=model,
      vocab_size=vocab_size,
      model_type="unigram",
      hard_vocab_limit=False,
      character_coverage=character_coverage,
      normalization_rule_name="nfkc_cf" if lower_case else "nfkc",
      remove_extra_whitespaces=False,
      add_dummy_prefix=False,
      split_digits=True,
      byte_fallback=byte_fallback,
      max_sentence_length=1 << 16,
      pad_id=text.PAD_ID,
      bos_id=text.START_ID,
      eos_id=text.END_ID,
      unk_id=text.UNK_ID,
      pad_piece=text.PAD,
      bos_piece=text.START,
      eos_piece=text.END,
      unk_piece=text.UNK,
      num_threads=2,
      minloglevel=2,
    )
  except RuntimeError as error:
    # SentencePiece: "Vocabulary size is smaller than required_chars. 62 vs 63. ..." (the
    # second number counts the characters it must keep and its meta pieces).
    found = re.search(r"smaller than required_chars\. (\d+) vs (\d+)", str(error))
    if not found:
      raise
    raise ValueError(
      f"--vocab_size={vocab_size} is too small for a SentencePiece vocabulary of this text: "
      f"its characters (at --character_coverage={character_coverage}) and the reserved"
      f"{' and 256 byte' if byte_fallback else ''} pieces need at least {found.group(2)}; "
      "raise --vocab_size, lower --character_coverage, or use --tokenizer=char or byte"
    ) from None
  return model.getvalue()


def learn_wordpiece(texts, vocab_size, max_examples=200_000):
  """Learns a (case-folded) WordPiece vocabulary; returns the list of tokens."""
  from tensorflow_text.tools.wordpiece_vocab import bert_vocab_from_dataset

  if not isinstance(texts, tf.data.Dataset):
    texts = tf.data.Dataset.from_tensor_slices(list(texts))
  words = (
    texts.take(max_examples)
    .batch(1024)
    .map(lambda batch: tf.strings.reduce_join(text.split_words(batch), axis=-1, separator=" "))
  )
  return bert_vocab_from_dataset.bert_vocab_from_dataset(
    words.unbatch(),
    vocab_size=vocab_size,
    reserved_tokens=list(text.RESERVED_TOKENS),
    bert_tokenizer_params=dict(lower_case=False),
    learn_params={},
  )


def learn_characters(counts: collections.Counter, vocab_size: int):
  """The lines of a `.chars` vocabulary: the reserved tokens, then the `vocab_size - 4` most
  frequent characters of `counts` (ties: the lower code point), in code point order."""
  room = vocab_size - len(text.RESERVED_TOKENS)
  if not counts:
    raise ValueError("no characters in the training text to learn a character vocabulary from")
  if room < 1:
    raise ValueError(
      f"--vocab_size={vocab_size} leaves no id for a character after the "
      f"{len(text.RESERVED_TOKENS)} reserved ones"
    )
  commonest = sorted(counts, key=lambda c: (-counts[c], ord(c)))[:room]
  return list(text.RESERVED_TOKENS) + [text.character_line(ord(c)) for c in sorted(commonest)]


def unknown_characters(tokenizer, counts: collections.Counter):
  """[(character, occurrences)] of the characters in `counts` that `tokenizer` maps to [UNK]
  (alone), commonest first."""
  characters = sorted(counts)
  if not characters:
    return []
  ids = tokenizer.tokenize(tf.constant(characters)).to_list()
  unknown = [c for c, row in zip(characters, ids) if text.UNK_ID in row]
  return sorted(((c, counts[c]) for c in unknown), key=lambda item: (-item[1], item[0]))


def report_unknown(kind, path, counts: collections.Counter, unknown) -> str:
  """One line: how many characters of the learning text `path`'s vocabulary maps to [UNK], the
  commonest few, and what would keep them."""
  total = sum(counts.values())
  if not unknown:
    return (
      f"{path}: every character of the learning text ({total:,}, {len(counts):,} distinct) "
      "has an id: none maps to [UNK]"
    )
  named = ", ".join(f"{c!r} x{n:,}" for c, n in unknown[:_NAMED_UNKNOWN])
  more = f" and {len(unknown) - _NAMED_UNKNOWN} more" if len(unknown) > _NAMED_UNKNOWN else ""
  if kind == CHARACTER:
    fix = f"--vocab_size >= {len(counts) + len(text.RESERVED_TOKENS)} keeps every one"
  else:
    fix = (
      f"a --vocab_size >= {_BYTE_FALLBACK_MIN_VOCAB} spells them in bytes, "
      "--character_coverage=1 keeps every character, --tokenizer=char or byte has them all"
    )
  return (
    f"{path}: {sum(n for _, n in unknown):,} of the {total:,} characters of the learning text "
    f"map to [UNK] ({len(unknown)} of {len(counts)} distinct: {named}{more}); {fix}"
  )


def learn_and_write(
  kind,
  texts,
  vocab_size,
  path_without_suffix,
  lower_case=False,
  max_examples=200_000,
  character_coverage=DEFAULT_CHARACTER_COVERAGE,
):
  """Learns a vocabulary of `kind` from `texts` (a dataset of scalar strings, or a sequence of
  UTF-8 bytes) and writes it atomically; returns the file's path. SentencePiece and character
  vocabularies log how many characters of `texts` they map to [UNK] (a warning when any do).
  Character and byte vocabularies keep text exactly (no normalization: `lower_case` is for
  SentencePiece); a byte vocabulary reads no text and always has 260 ids."""
  if kind not in TOKENIZERS:
    raise ValueError(f"tokenizer must be one of {TOKENIZERS}, got {kind!r}")
  started = time.time()
  path = path_without_suffix + _SUFFIXES[kind]
  if kind == BYTE:
    write_text_atomically(path, "\n".join(text.byte_vocabulary()) + "\n")
    logging.info("byte vocabulary (260 ids: every UTF-8 byte, no [UNK]) -> %s", path)
    return path
  logging.info(
    "learning a %s vocabulary of at most %d ids from up to %d examples -> %s",
    kind,
    vocab_size,
    max_examples,
    path_without_suffix,
  )
  counts = collections.Counter()
  if kind == SENTENCEPIECE:
    model = learn_sentencepiece(
      texts, vocab_size, lower_case, max_examples, character_coverage, counts
    )
    write_bytes_atomically(path, model)
  elif kind == CHARACTER:
    for string in _strings(texts, max_examples):
      counts.update(string)
    write_text_atomically(path, "\n".join(learn_characters(counts, vocab_size)) + "\n")
  else:
    write_text_atomically(path, "\n".join(learn_wordpiece(texts, vocab_size, max_examples)) + "\n")
  logging.info("vocabulary learned in %.1f s", time.time() - started)
  if counts:
    unknown = unknown_characters(text.load_tokenizer(path), counts)
    (logging.warning if unknown else logging.info)(report_unknown(kind, path, counts, unknown))
  return path
