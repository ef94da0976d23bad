"""Packing for translation: several (source, target) pairs share one row, each pair a segment.

A row holds `length` source tokens and `length` target tokens. Pair k of a row sits in segment
k (numbered 1, 2, ...; 0 marks padding) on both sides, so the model (`tfattn.Transformer` with
`source_segments`/`target_segments`) keeps every attention inside its pair and restarts the
positions: each pair is computed as if it had its own row, and far fewer tokens are padding.
The idea is tensor2tensor's `pack_dataset` and Flax's WMT example.

Packing streams: pairs are taken a window at a time (`PACK_WINDOW` pairs) and placed greedily,
longest first (first-fit decreasing): each pair goes into the first row of the window where both
its sides still fit. Rows are `--max_length` tokens, or shorter (`row_length`, chosen from the
data by `choose_row_length`) with the few longer pairs in rows of `--max_length`.
Memory holds one window, whatever the corpus size; no pair is dropped or cut (each fits one
row: the pipeline has already dropped longer pairs).
"""

import math
from typing import Dict, Sequence, Tuple

import tensorflow as tf

SOURCE_SEGMENTS = "source_segments"
TARGET_SEGMENTS = "target_segments"
# Pairs packed together. A larger window fills rows a little better (first fit finds a gap
# for more of the short pairs) at O(window) work per pair.
PACK_WINDOW = 512


def segments_of(batch: Dict) -> Dict:
  """The model's segment arguments for a batch: {} for an unpacked one."""
  if SOURCE_SEGMENTS not in batch:
    return {}
  return {"source_segments": batch[SOURCE_SEGMENTS], "target_segments": batch[TARGET_SEGMENTS]}


def _first_fit(source_lengths, target_lengths, length: int):
  """Places pairs of these lengths (int32 `[n]` each, every one at most `length`) into rows.

  Returns int32 `[n]` each: the row of each pair, where its source and its target start in
  that row, and its segment number there (1 for the first pair a row gets)."""
  n = tf.shape(source_lengths)[0]
  empty = tf.zeros([n], tf.int32)  # n rows are always enough: one pair a row
  outputs = [tf.TensorArray(tf.int32, size=n) for _ in range(4)]

  def place(i, source_fill, target_fill, pairs, outputs):
    fits = (source_fill + source_lengths[i] <= length) & (target_fill + target_lengths[i] <= length)
    row = tf.argmax(tf.cast(fits, tf.int32), output_type=tf.int32)  # the first row with room
    found = [row, source_fill[row], target_fill[row], pairs[row] + 1]
    outputs = [array.write(i, value) for array, value in zip(outputs, found)]
    chosen = tf.one_hot(row, n, dtype=tf.int32)
    return (
      i + 1,
      source_fill + chosen * source_lengths[i],
      target_fill + chosen * target_lengths[i],
      pairs + chosen,
      outputs,
    )

  *_, outputs = tf.while_loop(
    lambda i, *_: i < n, place, (tf.constant(0), empty, empty, empty, outputs)
  )
  return tuple(array.stack() for array in outputs)


def _lengths(values: tf.RaggedTensor) -> tf.Tensor:
  return tf.cast(values.row_lengths(), tf.int32)


def _scatter(values: tf.RaggedTensor, rows, starts, rows_used, length: int, fill=None):
  """Writes each pair's tokens (`values` `[n, (tokens)]`), or `fill` `[n]` once per token,
  into its row from its start -> int32 `[rows_used, length]`, 0 elsewhere."""
  pair = tf.cast(values.value_rowids(), tf.int32)  # [tokens]: the pair each token belongs to
  within = tf.ragged.range(_lengths(values)).flat_values
  index = tf.stack([tf.gather(rows, pair), tf.gather(starts, pair) + within], 1)
  updates = values.flat_values if fill is None else tf.gather(fill, pair)
  return tf.scatter_nd(index, updates, [rows_used, length])


def _pack_window(window: Dict[str, tf.RaggedTensor], length: int) -> Dict[str, tf.Tensor]:
  """One window of pairs (`[n, (tokens)]` each, no side longer than `length`) -> its packed
  rows, `[rows, length]` each."""
  # Longest first (first-fit decreasing): the short pairs left at the end fill the gaps the
  # long ones leave. Rows of 32 tokens: 93% of Multi30k's target tokens real, against 90% in
  # arrival order (WORKSPACE_NOTES, issue 41, packing speed).
  longest = tf.maximum(_lengths(window["source"]), _lengths(window["target_in"]))
  order = tf.argsort(longest, direction="DESCENDING", stable=True)
  window = {name: tf.gather(side, order) for name, side in window.items()}
  source, target_in, target_out = window["source"], window["target_in"], window["target_out"]
  rows, source_starts, target_starts, segments = _first_fit(
    _lengths(source), _lengths(target_in), length
  )
  rows_used = tf.reduce_max(tf.concat([rows, [-1]], 0)) + 1  # first fit opens rows in order
  source_rows = (rows, source_starts, rows_used, length)
  target_rows = (rows, target_starts, rows_used, length)
  return {
    "source": _scatter(source, *source_rows),
    SOURCE_SEGMENTS: _scatter(source, *source_rows, fill=segments),
    "target_in": _scatter(target_in, *target_rows),
    "target_out": _scatter(target_out, *target_rows),
    TARGET_SEGMENTS: _scatter(target_in, *target_rows, fill=segments),
  }


def _pack_window_by_length(window: Dict[str, tf.RaggedTensor], row_lengths: Sequence[int]):
  """One window of pairs -> one dict of packed rows per row length, `[rows, row_length]` each:
  each pair goes into rows of the shortest length that holds both its sides."""
  longest = tf.maximum(_lengths(window["source"]), _lengths(window["target_in"]))  # [n]
  packed, shorter = [], 0
  for row_length in row_lengths:
    mine = tf.where((longest > shorter) & (longest <= row_length))[:, 0]
    packed.append(
      _pack_window({name: tf.gather(side, mine) for name, side in window.items()}, row_length)
    )
    shorter = row_length
  return tuple(packed)


def pack_pairs(examples: tf.data.Dataset, length: int, window: int = PACK_WINDOW, row_length=None):
  """Framed pairs -> packed rows.

  Args:
    examples: {"source", "target_in", "target_out"}: int32 `[tokens]` each, target_in and
      target_out of one length, no side longer than `length`.
    length: the longest pair's tokens a side (`--max_length`).
    window: pairs packed together (first fit within them).
    row_length: None, or rows shorter than `length` (a multiple of 8 is best): the pairs that
      fit them are packed into rows of `row_length` tokens, the few longer ones into rows of
      `length`. Attention costs O(row length^2) a row, so shorter rows cost less per token.
  Returns:
    A dataset of rows {"source", "source_segments", "target_in", "target_out",
    "target_segments"}: int32 `[row_length or length]` each, padded with 0 (all the rows of a
    window of `row_length`, then its rows of `length`).
  """
  row_lengths = [length] if row_length is None or row_length >= length else [row_length, length]
  windows = examples.ragged_batch(window)
  packed = windows.map(
    lambda w: _pack_window_by_length(w, row_lengths),
    num_parallel_calls=tf.data.AUTOTUNE,
    deterministic=True,
  )
  return packed.flat_map(_rows)


def _rows(*packed_by_length) -> tf.data.Dataset:
  """Each row length's packed rows, one after another, as one dataset of rows."""
  rows = tf.data.Dataset.from_tensor_slices(packed_by_length[0])
  for more in packed_by_length[1:]:
    rows = rows.concatenate(tf.data.Dataset.from_tensor_slices(more))
  return rows


def choose_row_length(pair_lengths, length: int, candidates: Sequence[int], share=0.99) -> int:
  """The packed row length for pairs of these lengths (each pair's longer side, framed): the
  shortest of `candidates` (e.g. the batch buckets' lengths, `length` last) that holds at
  least `share` of the pairs whole; the rest go into rows of `length`.

  Why not always `length`: a row's attention weights grow with the square of its length, and
  without XLA their element-wise work (mask, softmax, dropout and their gradients) runs
  unfused, so a row of 64 tokens costs more per token than two of 32 (WORKSPACE_NOTES, issue
  41, packing speed)."""
  ordered = sorted(int(n) for n in pair_lengths)
  if not ordered:
    return length
  needed = ordered[max(math.ceil(share * len(ordered)) - 1, 0)]  # holds `share` of them
  fitting = [c for c in sorted(candidates) if c >= needed and c <= length]
  return fitting[0] if fitting else length


def real_token_share(batches: tf.data.Dataset) -> Tuple[float, int, int]:
  """Over every batch of `batches` (dicts with "source" and "target_in" `[rows, length]`):
  (the share of their tokens, both sides, that are not padding; pairs; rows)."""
  real = padded = pairs = rows = 0
  for batch in batches.as_numpy_iterator():
    for name in ("source", "target_in"):
      real += int((batch[name] != 0).sum())
      padded += batch[name].size
    rows += len(batch["source"])
    pairs += _pairs_in(batch)
  return real / max(padded, 1), pairs, rows


def _pairs_in(batch) -> int:
  """Pairs in a numpy batch: the highest segment of each row, or one a row unpacked."""
  if SOURCE_SEGMENTS in batch:
    return int(batch[SOURCE_SEGMENTS].max(axis=1).sum())
  return len(batch["source"])
