"""Packing for translation (train/packing.py): no pair lost, segments and positions per pair,
and the same loss as the pairs unpacked."""

import collections

import numpy as np
import pytest
import tensorflow as tf

import tfattn
from tfattn import text
from tfattn.position import segment_positions
from train import data, kinds, packing, tasks, tokenizer
from train.batching import Batching, Packing
from train.run_config import RunConfig

LENGTH = 12


def _framed_pairs(count, seed=0, longest=LENGTH):
  """`count` random pairs, framed as the pipeline frames them (START + target, target + END),
  no side longer than LENGTH."""
  rng = np.random.default_rng(seed)
  pairs = []
  for _ in range(count):
    source = rng.integers(3, 40, rng.integers(1, longest + 1))
    target = rng.integers(3, 40, rng.integers(1, longest))
    pairs.append(
      {
        "source": source.astype(np.int32),
        "target_in": np.concatenate([[text.START_ID], target]).astype(np.int32),
        "target_out": np.concatenate([target, [text.END_ID]]).astype(np.int32),
      }
    )
  return pairs


def _dataset(pairs):
  spec = {key: tf.TensorSpec([None], tf.int32) for key in ("source", "target_in", "target_out")}
  return tf.data.Dataset.from_generator(lambda: iter(pairs), output_signature=spec)


def _key(pair):
  return tuple(tuple(int(x) for x in pair[name]) for name in ("source", "target_in", "target_out"))


def _unpack(row):
  """A packed row -> its pairs, in segment order, read back through the segment ids."""
  pairs = []
  for k in range(1, int(row[packing.SOURCE_SEGMENTS].max()) + 1):
    on_source, on_target = row[packing.SOURCE_SEGMENTS] == k, row[packing.TARGET_SEGMENTS] == k
    pairs.append(
      {
        "source": row["source"][on_source],
        "target_in": row["target_in"][on_target],
        "target_out": row["target_out"][on_target],
      }
    )
  return pairs


def test_every_pair_is_packed_once_whole_in_one_segment_of_one_row():
  pairs = _framed_pairs(150, longest=6)
  rows = list(packing.pack_pairs(_dataset(pairs), LENGTH, window=32).as_numpy_iterator())
  assert len(rows) < len(pairs) * 0.7  # rows are shared
  found = [pair for row in rows for pair in _unpack(row)]
  assert collections.Counter(map(_key, found)) == collections.Counter(map(_key, pairs))
  for row in rows:
    for side in (packing.SOURCE_SEGMENTS, packing.TARGET_SEGMENTS):
      segments = row[side]
      real = segments > 0
      assert (row["source" if side == packing.SOURCE_SEGMENTS else "target_in"] > 0).tolist() == (
        real.tolist()
      )
      # Segments 1, 2, ... in order, each one contiguous run, padding only at the end.
      runs = [k for i, k in enumerate(segments[real]) if i == 0 or k != segments[real][i - 1]]
      assert runs == list(range(1, len(runs) + 1))
      assert not real[np.argmin(real) :].any() or real.all()
    # Each pair's decoder input starts with START; its positions start at 0.
    starts = np.flatnonzero(np.diff(row[packing.TARGET_SEGMENTS], prepend=0) > 0)
    assert (row["target_in"][starts] == text.START_ID).all()
    positions = segment_positions(row[packing.TARGET_SEGMENTS][np.newaxis]).numpy()[0]
    assert (positions[starts] == 0).all()
    assert row[packing.SOURCE_SEGMENTS].max() == row[packing.TARGET_SEGMENTS].max()


def test_first_fit_fills_an_earlier_row_before_opening_a_new_one():
  # Lengths (source, target + 1): 8+3 opens row 0, 8+3 does not fit it (16 > 12): row 1;
  # 3+3 fits row 0 again.
  pairs = [
    {"source": np.full(s, 5, np.int32), "target_in": np.full(t, 1, np.int32)}
    for s, t in ((8, 3), (8, 3), (3, 3))
  ]
  for pair in pairs:
    pair["target_out"] = pair["target_in"]
  rows = list(packing.pack_pairs(_dataset(pairs), LENGTH).as_numpy_iterator())
  assert [row[packing.SOURCE_SEGMENTS].max() for row in rows] == [2, 1]
  assert (rows[0][packing.SOURCE_SEGMENTS] > 0).sum() == 11


def test_longer_pairs_are_placed_first_so_short_ones_fill_their_gaps():
  # Sources of 4, 4, 4 then 8, 8, 8 tokens in rows of 12: in arrival order the 4s share a row
  # and each 8 opens its own (4 rows); longest first, each 8 takes a 4 (3 rows).
  pairs = [
    {"source": np.full(n, 5, np.int32), "target_in": np.full(1, 1, np.int32)}
    for n in (4, 4, 4, 8, 8, 8)
  ]
  for pair in pairs:
    pair["target_out"] = pair["target_in"]
  rows = list(packing.pack_pairs(_dataset(pairs), LENGTH).as_numpy_iterator())
  assert sorted((row[packing.SOURCE_SEGMENTS] > 0).sum() for row in rows) == [12, 12, 12]


def _model():
  config = tfattn.TransformerConfig.preset(
    "tiny", source_vocab_size=40, target_vocab_size=40, max_length=LENGTH
  ).replace(dropout_rate=0.0, attention_dropout_rate=0.0, feed_forward_dropout_rate=0.0)
  return tfattn.Transformer(config)


def test_packed_batches_give_the_loss_of_the_unpacked_pairs():
  pairs = _framed_pairs(40, seed=1)
  model, kind = _model(), kinds.Seq2Seq()
  packed = next(packing.pack_pairs(_dataset(pairs), LENGTH).batch(100).as_numpy_iterator())
  unpacked = next(
    _dataset(pairs)
    .padded_batch(100, padded_shapes={k: [LENGTH] for k in pairs[0]})
    .as_numpy_iterator()
  )
  assert len(packed["source"]) < len(unpacked["source"])
  packed_sums = kind.loss_sums(model, packed, smoothing=0.1)
  unpacked_sums = kind.loss_sums(model, unpacked, smoothing=0.1)
  assert float(packed_sums.count) == float(unpacked_sums.count)  # the same target tokens
  assert float(packed_sums.correct) == float(unpacked_sums.correct)
  np.testing.assert_allclose(float(packed_sums.loss), float(unpacked_sums.loss), rtol=1e-5)


def _tokenizer(tmp_path):
  return text.load_tokenizer(
    tokenizer.learn_and_write(
      tokenizer.SENTENCEPIECE,
      tf.data.Dataset.from_tensor_slices(["7 8"] * 10),
      200,
      str(tmp_path / "vocab"),
    )
  )


def test_the_training_pipeline_packs_short_pairs_into_short_rows(tmp_path):
  # n words are 2n - 1 pieces: 100 pairs of at most 7 pieces a side (framed) and one of 13,
  # so rows of 8 hold 99% of them.
  pairs = [(" ".join("7" * n), " ".join("8" * (n % 3 + 1))) for n in range(1, 5)] * 25
  pairs.append((" ".join("7" * 7), "8"))
  raw = tf.data.Dataset.from_tensor_slices(tuple(map(list, zip(*pairs))))
  tok = _tokenizer(tmp_path)
  batching = dict(max_length=16, batch_size=4, batch_tokens=64)
  assert data.packed_row_length(raw, tok, tok, 16) == 8
  batches = list(data.seq2seq_dataset(raw, tok, tok, pack=True, **batching).as_numpy_iterator())
  # 64 tokens a side a batch: 8 rows of 8, and the long pair's one row of 16.
  assert {tuple(b["source"].shape) for b in batches if len(b["source"]) == 8} == {(8, 8)}
  assert [b["source"].shape for b in batches if b["source"].shape[1] == 16] == [(1, 16)]
  segments = {packing.SOURCE_SEGMENTS, packing.TARGET_SEGMENTS}
  assert set(batches[0]) == {"source", "target_in", "target_out", *segments}
  packed_share, packed_pairs, _ = packing.real_token_share(
    data.seq2seq_dataset(raw, tok, tok, pack=True, **batching)
  )
  full_share, full_pairs, _ = packing.real_token_share(
    data.seq2seq_dataset(raw, tok, tok, pack=True, pack_row_length=16, **batching)
  )
  unpacked_share, unpacked_pairs, _ = packing.real_token_share(
    data.seq2seq_dataset(raw, tok, tok, **batching)
  )
  assert packed_pairs == full_pairs == unpacked_pairs == len(pairs)
  assert packed_share > unpacked_share and full_share > unpacked_share


def test_the_row_length_is_the_shortest_candidate_holding_the_share():
  lengths = [5] * 99 + [40]
  assert packing.choose_row_length(lengths, 64, [8, 16, 32, 64]) == 8
  assert packing.choose_row_length(lengths, 64, [8, 16, 32, 64], share=0.995) == 64
  assert packing.choose_row_length([5] * 98 + [20, 40], 64, [8, 16, 32, 64]) == 32
  assert packing.choose_row_length([30] * 10, 64, [8, 16, 32, 64]) == 32
  assert packing.choose_row_length([], 64, [8, 16, 32, 64]) == 64


def test_pairs_go_to_rows_of_the_shortest_length_that_holds_them():
  pairs = _framed_pairs(60, seed=2, longest=LENGTH)
  rows = list(
    packing.pack_pairs(_dataset(pairs), LENGTH, window=32, row_length=6).as_numpy_iterator()
  )
  found = [pair for row in rows for pair in _unpack(row)]
  assert collections.Counter(map(_key, found)) == collections.Counter(map(_key, pairs))
  for row in rows:
    longest = max(max(len(pair["source"]), len(pair["target_in"])) for pair in _unpack(row))
    assert len(row["source"]) == (6 if longest <= 6 else LENGTH)
  assert {len(row["source"]) for row in rows} == {6, LENGTH}


@pytest.mark.parametrize(
  "values,kind,message",
  [
    (dict(pack_examples=True), "classification", "seq2seq"),
    (dict(pack_examples=True, attention_window=8), "seq2seq", "full attention"),
  ],
)
def test_packing_is_refused_where_it_cannot_work(values, kind, message):
  with pytest.raises(ValueError, match=message):
    RunConfig.of(**values).check(kind=kind)


@pytest.mark.slow  # builds two small Trainers and traces their loops
def test_a_stopped_packed_run_resumes_the_packed_stream_where_it_stopped(tmp_path):
  """`--pack_examples`: a run saved after 3 steps (as SIGTERM or Ctrl-C leaves it) and resumed
  by `Trainer.run` reads the packed rows the uninterrupted run read next: it ends with the same
  weights, and its next batch of rows is the uninterrupted run's. A resume that restarted the
  packed stream would train steps 4-6 on rows 1-3 again."""
  from train_helpers import SMALL_CONFIG, resume_and_go_on

  config = SMALL_CONFIG.replace(
    run_dir=str(tmp_path / "run"),
    batch_size=4,
    warmup_steps=2,
    train_steps=6,
    eval_examples=4,
    test_examples=4,
    decode=dict(strategy="greedy"),
    attention_images=0,
    pack_examples=True,  # graph mode: XLA and float16 are test_train_step.py's resume test
  )
  straight, _ = resume_and_go_on(config)
  assert packing.SOURCE_SEGMENTS in next(straight.iterator)  # packed rows


def test_pack_examples_reaches_the_kind_through_the_task_packing_for_training_only(tmp_path):
  path = tmp_path / "train.tsv"
  path.write_text("7 7\t8\n7\t8 8\n" * 6)
  assert tasks.get_task(RunConfig.of(task="tsv", train_file=str(path)).data).packing == Packing()
  task = tasks.get_task(RunConfig.of(task="tsv", train_file=str(path), pack_examples=True).data)
  assert task.packing == Packing(pairs=True)
  tok = _tokenizer(tmp_path)

  def first_batch(training):
    dataset = kinds.Seq2Seq().dataset(
      task.train(),
      {"source": tok, "target": tok},
      Batching(batch_size=4, max_length=16, training=training),
      task.packing,
    )
    return next(dataset.as_numpy_iterator())

  assert packing.SOURCE_SEGMENTS in first_batch(training=True)
  assert packing.SOURCE_SEGMENTS not in first_batch(training=False)  # validation: unpacked
