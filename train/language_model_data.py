"""The language model's batches: packed token streams cut into blocks (nanoGPT, keras-hub's
causal LMs, tensor2tensor's packed problems, Flax's lm1b), and the report of the line mode's cut
texts.

Packed: raw examples are (text, ends_document) pairs, a piece of a document (a line with its
newline, or a whole one-line document) and whether a document ends after it. A document of
tokens t1..tn gives the (input, target) pairs (START, t1), (t1, t2), ..., (tn, END): each token
and each END is a target exactly once, START is only read. The pairs of every document, one after
another, are cut into blocks of `block_length`; a finite stream's last block is padded (PAD ids,
segment 0), never dropped. Training repeats the stream before it is cut, so every training block
is full and an epoch's cuts fall elsewhere the next epoch (unless its token count is a multiple
of the block length); the blocks are shuffled through a buffer of `SHUFFLE_TOKENS` tokens.

Batches: {"inputs", "targets"} int32 `[batch, block_length]`, and with `segments` also
"segment_ids" int32 `[batch, block_length]` (the document of each pair, 0 for padding): the
model then restarts attention and positions at each document (`LanguageModel(segment_ids=)`).
Without them attention crosses document boundaries, as nanoGPT trains.

Everything streams: memory holds a chunk of text, the shuffle buffer and a batch, whatever the
corpus size, and a checkpointed iterator resumes exactly (the scan's state and the buffer are in
the checkpoint).
"""

from typing import Optional

import tensorflow as tf
from absl import logging

from tfattn.special_ids import END_ID, PAD_ID, START_ID

INPUTS, TARGETS, SEGMENT_IDS = "inputs", "targets", "segment_ids"
# Text pieces tokenized at once.
TOKENIZE_BATCH = 256
# Training blocks are shuffled through a buffer of this many tokens (the buffer is saved with the
# input position: ~6 MB of checkpoint with segment ids).
SHUFFLE_TOKENS = 1 << 19
# Segment ids count documents modulo this (int32; only neighbours must differ).
_SEGMENT_MODULUS = 1 << 30
# The line mode's cut report reads at most this many texts of a data role at start.
CUT_CHECK_TEXTS = 100_000
# Characters of a cut text quoted in the report.
QUOTED_CHARS = 60


def _stream_tokens(tokenizer):
  """(`[n]` texts, bool `[n]` ends) -> int32 `[m]`: their tokens, one after another, END after
  each piece that ends a document."""

  def tokens(texts, ends):
    pieces = tf.cast(tokenizer.tokenize(texts), tf.int32)  # ragged [n, (k)]
    ends = tf.cast(ends, tf.int64)
    end_tokens = tf.RaggedTensor.from_row_lengths(
      tf.fill([tf.reduce_sum(ends)], tf.constant(END_ID, tf.int32)), ends
    )
    return tf.concat([pieces, end_tokens], axis=1).flat_values

  return tokens


def _blocks_of_chunk(block_length):
  """The scan over token chunks that cuts them into blocks. State: (the previous token int32,
  the document number int64, the pairs not yet in a block: int32, int32, int64 `[r]`, r <
  block_length). A chunk (int32 `[m]` tokens, bool `last`) -> (inputs, targets, documents)
  `[k, block_length]`: each token read after the one before it (START after an END), the
  pairs cut into whole blocks; with `last`, the rest padded into a final block."""

  def scan(state, chunk):
    previous, document, *carried = state
    tokens, last = chunk
    before = tf.concat([[previous], tokens], 0)
    inputs = tf.where(tf.equal(before[:-1], END_ID), START_ID, before[:-1])
    ends = tf.cast(tf.equal(tokens, END_ID), tf.int64)
    documents = document + tf.cumsum(ends, exclusive=True)  # an END belongs to its document
    pending = [tf.concat([old, new], 0) for old, new in zip(carried, (inputs, tokens, documents))]
    size = tf.shape(pending[0])[0]
    # A last chunk pads its rest to a whole block (PAD ids, document 0); others keep it.
    padded = tf.where(last, -(-size // block_length) * block_length, size)
    pending = [tf.pad(p, [[0, padded - size]], constant_values=PAD_ID) for p in pending]
    whole = padded // block_length * block_length
    cut = [tf.reshape(p[:whole], [-1, block_length]) for p in pending]
    state = (before[-1], document + tf.reduce_sum(ends), *(p[whole:] for p in pending))
    return state, tuple(cut)

  return scan


def token_blocks(raw: tf.data.Dataset, tokenizer, block_length: int, finite: bool):
  """(text, ends_document) pairs -> (inputs, targets, int64 documents) `[block_length]` blocks;
  a `finite` stream's last block padded."""
  chunks = raw.batch(TOKENIZE_BATCH).map(
    _stream_tokens(tokenizer), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
  )
  chunks = chunks.map(lambda tokens: (tokens, tf.constant(False)))
  if finite:  # an empty last chunk flushes the rest
    chunks = chunks.concatenate(
      tf.data.Dataset.from_tensors((tf.zeros([0], tf.int32), tf.constant(True)))
    )
  empty = (tf.zeros([0], tf.int32), tf.zeros([0], tf.int32), tf.zeros([0], tf.int64))
  initial = (tf.constant(END_ID, tf.int32), tf.constant(1, tf.int64), *empty)  # START first
  return chunks.scan(initial, _blocks_of_chunk(block_length)).unbatch()


def blocks(blocks_of_pairs: tf.data.Dataset, segments: bool) -> tf.data.Dataset:
  """(inputs, targets, documents) blocks -> {"inputs", "targets"(, "segment_ids")} int32
  `[block_length]`."""

  def example(inputs, targets, documents):
    found = {INPUTS: inputs, TARGETS: targets}
    if segments:
      ids = tf.where(documents > 0, (documents - 1) % _SEGMENT_MODULUS + 1, 0)
      found[SEGMENT_IDS] = tf.cast(ids, tf.int32)  # padding: segment 0
    return found

  return blocks_of_pairs.map(example, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def packed_dataset(
  raw: tf.data.Dataset,
  tokenizer,
  batch_size: int,
  max_length: int,
  shuffle_seed: Optional[int] = None,
  repeat: bool = False,
  drop_remainder: bool = False,
  batch_tokens: Optional[int] = None,
  multiple_of: int = 1,
  pad_to_bucket: bool = False,
  segments: bool = False,
  shuffle_tokens: int = SHUFFLE_TOKENS,
) -> tf.data.Dataset:
  """(text, ends_document) pairs -> batches of blocks of `max_length` pairs (see the module).

  Args:
    raw: the pieces, in document order (never shuffled: they are one text).
    tokenizer: the in-graph tokenizer (`tokenize`: `[n]` strings -> ragged ids).
    batch_size: blocks a batch; with `batch_tokens`, batch_tokens // max_length blocks, a
      multiple of `multiple_of`.
    max_length: the block length (the model's positions).
    shuffle_seed: shuffle the blocks (training); None: in order.
    repeat: repeat the stream before it is cut (training: every block full).
    drop_remainder: drop a last partial batch (training: equal replica shards).
    pad_to_bucket: ignored: every block has the one length already.
    segments: add "segment_ids" (attention and positions restart at each document).
    shuffle_tokens: the shuffle buffer's size in tokens, at most `SHUFFLE_TOKENS` (a buffer
      larger than the corpus only costs time to fill: give the corpus's size in bytes, at
      least its token count).
  """
  del pad_to_bucket  # one shape
  if batch_tokens:
    batch_size = batch_tokens // max_length // multiple_of * multiple_of
    if batch_size < 1:
      raise ValueError(
        f"--batch_tokens={batch_tokens} holds no {max_length}-token block "
        f"per replica: give at least {max_length * multiple_of}"
      )
  if repeat:
    raw = raw.repeat()
  ds = blocks(token_blocks(raw, tokenizer, max_length, finite=not repeat), segments)
  if shuffle_seed is not None:
    ds = ds.shuffle(max(min(shuffle_tokens, SHUFFLE_TOKENS) // max_length, 1), seed=shuffle_seed)
  ds = ds.batch(batch_size, drop_remainder=drop_remainder)
  # The tokenizer's table is read-only state: the iterator is checkpointed without it.
  options = tf.data.Options()
  options.experimental_external_state_policy = tf.data.experimental.ExternalStatePolicy.IGNORE
  return ds.with_options(options).prefetch(tf.data.AUTOTUNE)


def report_cut_texts(texts: tf.data.Dataset, tokenizer, max_tokens: int, role: str) -> int:
  """The line mode keeps a text's first `max_tokens` pieces: counts, over the first
  `CUT_CHECK_TEXTS` texts of `texts` (scalar strings), the texts longer than that and the
  pieces they lose, and logs one line with an example when there are any. Returns the count."""
  read = cut = dropped = 0
  example = None
  lengths = (
    texts.take(CUT_CHECK_TEXTS)
    .batch(1024)
    .map(lambda batch: (batch, tokenizer.tokenize(batch).row_lengths()))
  )
  for batch, batch_lengths in lengths.as_numpy_iterator():
    read += len(batch)
    over = batch_lengths > max_tokens
    cut += int(over.sum())
    dropped += int((batch_lengths[over] - max_tokens).sum())
    if example is None and over.any():
      index = int(over.argmax())
      example = (batch[index].decode("utf-8", "replace"), int(batch_lengths[index]))
  if cut:
    text, length = example
    quoted = text if len(text) <= QUOTED_CHARS else text[:QUOTED_CHARS] + "..."
    logging.warning(
      "%s texts: %d of the %s%d read are longer than %d pieces and are cut, %d pieces dropped "
      "(e.g. %r, %d pieces); --task=text --text_packing=blocks keeps every token",
      role,
      cut,
      "first " if read == CUT_CHECK_TEXTS else "",
      read,
      max_tokens,
      dropped,
      quoted,
      length,
    )
  return cut
