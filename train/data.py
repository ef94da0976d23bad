"""tf.data pipelines: tokenize, filter by length, bucket, pad, prefetch."""

import tensorflow as tf

from tfattn.support import shapes
from tfattn.text import END_ID, START_ID, truncate_tokens
from train import packing

# A dataset whose size is known and at most this is shuffled whole each epoch; larger ones
# through a buffer of this many examples.
MAX_SHUFFLE_BUFFER = 200_000
# Streamed files (size unknown): a smaller buffer. A checkpoint saves the buffer with the input
# position (exact resume), ~160 bytes a slot plus the text: ~20 MB at 250-byte lines.
STREAM_SHUFFLE_BUFFER = 50_000
# Shuffled examples are looked up this many at a time (`_permuted`).
PERMUTED_BLOCK = 512
# Training pairs whose lengths choose the packed row length (`packed_row_length`).
ROW_LENGTH_SAMPLE = 2000


def shuffled(raw, seed, repeat=False):
  """Examples in a new order each epoch (epoch after epoch with `repeat`). Files are often
  sorted (all negative reviews, then all positive ones): a small buffer would feed the model one
  class for thousands of steps, so the whole dataset is shuffled when its size is known and at
  most MAX_SHUFFLE_BUFFER (`_permuted`: a checkpoint saves a position, not the examples).
  Streamed files (unknown size) already arrive in a seeded file order, interleaved across files,
  and go through a buffer of STREAM_SHUFFLE_BUFFER examples."""
  size = int(raw.cardinality())
  scalars = all(spec.shape.rank == 0 for spec in tf.nest.flatten(raw.element_spec))
  if 0 < size <= MAX_SHUFFLE_BUFFER and scalars:
    return _permuted(raw, size, seed, repeat)
  buffer = STREAM_SHUFFLE_BUFFER if size == tf.data.UNKNOWN_CARDINALITY else MAX_SHUFFLE_BUFFER
  if 0 < size < buffer:
    buffer = size
  ds = raw.shuffle(buffer, seed=seed, reshuffle_each_iteration=True)
  return ds.repeat() if repeat else ds


def _permuted(raw, size, seed, repeat):
  """`raw`'s `size` examples read once into tensors, then read epoch by epoch in a seeded random
  permutation, a new one each epoch: position i of epoch e is example
  `RandomIndexShuffle(i, key(seed, e))` (stateless). The iterator's state is a position, where a
  shuffle buffer is checkpointed slot by slot: a save of the default task takes 0.13-0.20 s
  instead of 1.05-1.28 s (`benchmarks/checkpoint_cost.py`)."""
  examples = next(iter(raw.batch(size)))  # each component `[size]`
  epochs = tf.data.Dataset.counter() if repeat else tf.data.Dataset.range(1)

  def epoch_examples(epoch):
    # The cipher's key: 3 random words drawn from (seed, epoch), and 8 rounds. With the words
    # themselves as the key ([seed, epoch, 0]) or with 4 rounds (index_shuffle's), 1,000 examples
    # kept 3-8 in place on average (a uniform permutation keeps 1) and the first tenth of an epoch
    # drew 66% from the first half; with both changes, 0.8 and 53%, as numpy's permutations.
    key = tf.random.stateless_uniform(
      [3], tf.stack([tf.constant(seed, tf.int64), epoch]), None, None, tf.int64
    )

    def block(index):  # `[n]` positions in the epoch -> their `[n]` examples
      order = tf.raw_ops.RandomIndexShuffle(
        index=index, seed=key, max_index=tf.constant(size - 1, tf.int64), rounds=8
      )
      return tf.nest.map_structure(lambda column: tf.gather(column, order), examples)

    # Looked up in blocks: one example at a time took 28 CPU s for 3,000 default-task batches
    # against the buffer's 21 (one run each). One block at a time (a parallel map keeps as many
    # in flight as it has threads, and a checkpoint saves them): a checkpoint holds at most one
    # block, as one tensor per component.
    return tf.data.Dataset.range(size).batch(PERMUTED_BLOCK).map(block)

  return epochs.flat_map(epoch_examples).unbatch()


def bucket_lengths(max_length):
  """The padded lengths of the training batches' buckets: 8, 16, 32, ... then max_length."""
  return shapes.length_buckets(max_length, smallest=8)


def bucket_batch_sizes(max_length, batch_size, batch_tokens=None, multiple_of=1):
  """Examples per batch in each bucket: `batch_size` everywhere, or with `batch_tokens` as many
  as fit that many (padded) tokens, a multiple of `multiple_of` (the replicas sharing a batch)."""
  if not batch_tokens:
    return [batch_size] * len(bucket_lengths(max_length))
  sizes = [
    batch_tokens // length // multiple_of * multiple_of for length in bucket_lengths(max_length)
  ]
  if sizes[-1] < multiple_of:
    raise ValueError(
      f"--batch_tokens={batch_tokens} holds no {max_length}-token example "
      f"per replica: give at least {max_length * multiple_of}"
    )
  return sizes


def _bucket_and_batch(
  ds,
  length_fn,
  batch_size,
  max_length,
  drop_remainder,
  batch_tokens=None,
  multiple_of=1,
  pad_to_bucket=False,
):
  """Groups examples of similar length into batches padded with id 0: to the longest example,
  or with `pad_to_bucket` to the bucket's length, so that every batch has one of a few shapes
  (XLA compiles one program per shape)."""
  lengths = bucket_lengths(max_length)
  # bucket_by_sequence_length's bucket i holds lengths in [boundary[i-1], boundary[i]); the
  # last boundary (max_length + 1) leaves its overflow bucket empty.
  boundaries = [length + 1 for length in lengths]
  sizes = bucket_batch_sizes(max_length, batch_size, batch_tokens, multiple_of)
  ds = ds.bucket_by_sequence_length(
    length_fn,
    bucket_boundaries=boundaries,
    bucket_batch_sizes=[*sizes, sizes[-1]],
    drop_remainder=drop_remainder,
    pad_to_bucket_boundary=pad_to_bucket,
  )
  # The tokenizers' lookup tables are read-only state, so the iterator may be checkpointed
  # without them (exact resume saves the input position).
  options = tf.data.Options()
  options.experimental_external_state_policy = tf.data.experimental.ExternalStatePolicy.IGNORE
  return ds.with_options(options)


def seq2seq_dataset(
  raw,
  source_tokenizer,
  target_tokenizer,
  batch_size,
  max_length,
  shuffle_seed=None,
  repeat=False,
  drop_remainder=False,
  keep_text=False,
  pack=False,
  pack_row_length=None,
  start_id=START_ID,
  batch_tokens=None,
  multiple_of=1,
  pad_to_bucket=False,
):
  """(source, target) strings -> batches of {"source", "target_in", "target_out"}: int32
  `[batch, length]`; target_in = `start_id` (the model's decoder start, START unless its
  `decoder_start_id` says otherwise) + target, target_out = target + END.

  Training drops pairs longer than max_length. `batch_tokens`, `multiple_of` and
  `pad_to_bucket`: as `_bucket_and_batch` takes them (`train.batching.Batching`). With
  `keep_text` (evaluation) every pair is kept, truncated to max_length, and the batch also
  carries the raw reference string "target_text" `[batch]`, so metrics compare with the
  reference text itself.

  With `pack` (training), several pairs share each row (`train.packing`), and the batches also
  carry "source_segments" and "target_segments". Rows are `pack_row_length` tokens a side, by
  default the shortest bucket length that holds 99% of the first `ROW_LENGTH_SAMPLE` pairs
  (`packing.choose_row_length`; read once, now); the longer pairs go into rows of max_length.
  A batch holds `batch_tokens` tokens a side (default: `batch_size` rows of max_length), as
  many rows of its length as fit."""
  if pack and pack_row_length is None:
    pack_row_length = packed_row_length(raw, source_tokenizer, target_tokenizer, max_length)
  if shuffle_seed is not None:
    raw = shuffled(raw, shuffle_seed, repeat)
  elif repeat:
    raw = raw.repeat()

  def tokenize(source, target):
    return source_tokenizer.tokenize(source), target_tokenizer.tokenize(target), target

  def frame(source, target, target_text):
    example = {
      "source": source[:max_length],
      "target_in": tf.concat([[start_id], target], 0)[:max_length],
      "target_out": tf.concat([target, [END_ID]], 0)[:max_length],
    }
    if keep_text:
      example["target_text"] = target_text
    return example

  ds = (
    raw.batch(512).map(tokenize, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True).unbatch()
  )
  if not keep_text:
    ds = ds.filter(
      lambda s, t, _: tf.logical_and(tf.size(s) <= max_length, tf.size(t) + 1 <= max_length)
    )
  ds = ds.map(frame, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
  if pack:
    return _packed_batches(
      ds, batch_size, max_length, pack_row_length, drop_remainder, batch_tokens, multiple_of
    )
  ds = _bucket_and_batch(
    ds,
    lambda e: tf.maximum(tf.size(e["source"]), tf.size(e["target_in"])),
    batch_size,
    max_length,
    drop_remainder,
    batch_tokens,
    multiple_of,
    pad_to_bucket,
  )
  return ds.prefetch(tf.data.AUTOTUNE)


def packed_row_length(raw, source_tokenizer, target_tokenizer, max_length):
  """The packed row length for these (source, target) strings: from the lengths of the first
  `ROW_LENGTH_SAMPLE` pairs that fit max_length, framed (`packing.choose_row_length` over the
  bucket lengths)."""
  sample = raw.take(ROW_LENGTH_SAMPLE).batch(512)
  longest = []
  for source, target in sample:
    source_lengths = source_tokenizer.tokenize(source).row_lengths()
    target_lengths = target_tokenizer.tokenize(target).row_lengths() + 1  # START or END
    lengths = tf.maximum(source_lengths, target_lengths).numpy()  # one copy, not a tensor a pair
    longest.extend(int(n) for n in lengths if n <= max_length)
  return packing.choose_row_length(longest, max_length, bucket_lengths(max_length))


def _packed_batches(
  ds,
  batch_size,
  max_length,
  row_length,
  drop_remainder,
  batch_tokens=None,
  multiple_of=1,
):
  """Framed pairs -> batches of packed rows, `[rows, row_length]` or `[rows, max_length]` each
  (every row of a batch is one of those lengths, both bucket lengths, so padding to a bucket
  changes nothing): as many rows as hold `batch_tokens` tokens a side, by default `batch_size`
  rows of max_length."""
  rows = packing.pack_pairs(ds, max_length, row_length=row_length)
  batches = _bucket_and_batch(
    rows,
    lambda row: tf.size(row["source"]),
    batch_size,
    max_length,
    drop_remainder,
    batch_tokens=batch_tokens or batch_size * max_length,
    multiple_of=multiple_of,
  )
  return batches.prefetch(tf.data.AUTOTUNE)


def classification_dataset(
  raw,
  tokenizer,
  batch_size,
  max_length,
  shuffle_seed=None,
  repeat=False,
  drop_remainder=False,
  truncate="right",
  label_dtype=tf.int64,
  batch_tokens=None,
  multiple_of=1,
  pad_to_bucket=False,
):
  """(text, label) -> batches of {"source": int32 `[batch, length]`, "label": `label_dtype`
  `[batch]`} (int64 class ids; a kind whose label is a number of another type names it).

  Long texts are truncated to max_length on the `truncate` side rather than dropped.
  `batch_tokens`, `multiple_of`, `pad_to_bucket`: as in `seq2seq_dataset`."""
  if shuffle_seed is not None:
    raw = shuffled(raw, shuffle_seed, repeat)
  elif repeat:
    raw = raw.repeat()
  ds = (
    raw.batch(512)
    .map(
      lambda t, y: (truncate_tokens(tokenizer.tokenize(t), max_length, truncate), y),
      num_parallel_calls=tf.data.AUTOTUNE,
      deterministic=True,
    )
    .unbatch()
  )
  ds = ds.map(lambda s, y: {"source": s, "label": tf.cast(y, label_dtype)})
  ds = _bucket_and_batch(
    ds,
    lambda e: tf.size(e["source"]),
    batch_size,
    max_length,
    drop_remainder,
    batch_tokens,
    multiple_of,
    pad_to_bucket,
  )
  return ds.prefetch(tf.data.AUTOTUNE)
