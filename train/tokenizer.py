"""Learning vocabularies for the in-graph tokenizers of `tfattn.text`.

SentencePiece (default): the `sentencepiece` package's trainer, configured to be lossless
(NFKC, whitespace kept, no dummy prefix, digits split, byte fallback). WordPiece:
`bert_vocab_from_dataset` over `tfattn.text.split_words`.
"""

import io
import itertools
import time

import tensorflow as tf
from absl import logging

from tfattn import text
from train.files import write_bytes_atomically, write_text_atomically
from train.flag_choices import SENTENCEPIECE, TOKENIZERS, WORDPIECE  # noqa: F401

# Byte fallback spends 256 ids on raw bytes: only worth it (and possible) in larger vocabularies.
_BYTE_FALLBACK_MIN_VOCAB = 512


def _strings(texts, max_examples):
  """The first `max_examples` of a dataset of scalar strings, or of a sequence of bytes."""
  if isinstance(texts, tf.data.Dataset):
    texts = texts.take(max_examples).as_numpy_iterator()
  for value in itertools.islice(texts, max_examples):
    yield value.decode("utf-8")


def learn_sentencepiece(texts, vocab_size, lower_case=False, max_examples=200_000):
  """Trains a SentencePiece unigram model on a dataset of scalar strings; returns its bytes.

  Ids 0..3 are PAD, START, END, UNK. The vocabulary may come out smaller than `vocab_size`
  when the text has fewer distinct pieces (tiny synthetic tasks)."""
  model = io.BytesIO()
  import sentencepiece  # imported lazily: only learning needs the package, not the export

  sentencepiece.SentencePieceTrainer.train(
    sentence_iterator=_strings(texts, max_examples),
    model_writer=model,
    vocab_size=vocab_size,
    model_type="unigram",
    hard_vocab_limit=False,
    normalization_rule_name="nfkc_cf" if lower_case else "nfkc",
    remove_extra_whitespaces=False,
    add_dummy_prefix=False,
    split_digits=True,
    byte_fallback=vocab_size >= _BYTE_FALLBACK_MIN_VOCAB,
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


def learn_and_write(
  kind, texts, vocab_size, path_without_suffix, lower_case=False, max_examples=200_000
):
  """Learns a vocabulary of `kind` from `texts` (a dataset of scalar strings, or a sequence of
  UTF-8 bytes) and writes it atomically; returns the file's path."""
  if kind not in TOKENIZERS:
    raise ValueError(f"tokenizer must be one of {TOKENIZERS}, got {kind!r}")
  started = time.time()
  logging.info(
    "learning a %d-token %s vocabulary from up to %d examples -> %s",
    vocab_size,
    kind,
    max_examples,
    path_without_suffix,
  )
  if kind == SENTENCEPIECE:
    path = path_without_suffix + text.SENTENCEPIECE_SUFFIX
    write_bytes_atomically(path, learn_sentencepiece(texts, vocab_size, lower_case, max_examples))
  else:
    path = path_without_suffix + text.WORDPIECE_SUFFIX
    write_text_atomically(path, "\n".join(learn_wordpiece(texts, vocab_size, max_examples)) + "\n")
  logging.info("vocabulary learned in %.1f s", time.time() - started)
  return path
