"""train.data pipelines, train.evaluation metrics and the `python -m train` command line."""

import json

import numpy as np
import pytest
import sacrebleu
import tensorflow as tf

import tfattn
from tfattn import text
from tfattn.decode_options import DecodeOptions
from train import data, evaluation, tokenizer
from train.builtin_tasks import builtin_task
from train.number_words import number_to_words


@pytest.mark.parametrize(
  "n,words",
  [
    (0, "zero"),
    (7, "seven"),
    (13, "thirteen"),
    (40, "forty"),
    (99, "ninety nine"),
    (100, "one hundred"),
    (1234, "one thousand two hundred thirty four"),
    (1_000_001, "one million one"),
    (900_019, "nine hundred thousand nineteen"),
  ],
)
def test_number_to_words(n, words):
  assert number_to_words(n) == words


def _tokenizer(tmp_path, texts, vocab_size=200):
  return text.load_tokenizer(
    tokenizer.learn_and_write(
      tokenizer.SENTENCEPIECE,
      tf.data.Dataset.from_tensor_slices(texts),
      vocab_size,
      str(tmp_path / "vocab"),
    )
  )


def test_seq2seq_batches_are_bucketed_padded_and_framed(tmp_path):
  pairs = [(" ".join("7" * n), " ".join("8" * n)) for n in range(1, 30)] * 4
  raw = tf.data.Dataset.from_tensor_slices(tuple(map(list, zip(*pairs))))
  tok = _tokenizer(tmp_path, ["7 8"] * 10)
  batches = list(data.seq2seq_dataset(raw, tok, tok, batch_size=8, max_length=20))
  assert batches
  for batch in batches:
    lengths = tf.reduce_sum(tf.cast(batch["source"] > 0, tf.int32), axis=1)
    assert int(tf.reduce_max(lengths)) <= 20  # too-long examples are filtered out
    assert int(tf.reduce_max(lengths) - tf.reduce_min(lengths)) <= 16  # bucketed
    assert bool(tf.reduce_all(batch["target_in"][:, 0] == text.START_ID))
    shifted = batch["target_in"][:, 1:]
    assert bool(tf.reduce_all(tf.where(shifted > 0, batch["target_out"][:, :-1], 0) == shifted))
    ends = tf.reduce_sum(tf.cast(batch["target_out"] == text.END_ID, tf.int32), axis=1)
    assert bool(tf.reduce_all(ends == 1))
    assert "target_text" not in batch


def test_bucket_lengths_double_up_to_max_length():
  assert data.bucket_lengths(64) == [8, 16, 32, 64]
  assert data.bucket_lengths(100) == [8, 16, 32, 64, 100]
  assert data.bucket_lengths(5) == [5]
  assert data.bucket_batch_sizes(64, 32) == [32] * 4
  assert data.bucket_batch_sizes(64, 32, batch_tokens=1000, multiple_of=2) == [124, 62, 30, 14]
  with pytest.raises(ValueError, match="--batch_tokens=100 holds no 64-token example"):
    data.bucket_batch_sizes(64, 32, batch_tokens=100, multiple_of=2)


def test_token_batches_fill_a_budget_and_pad_to_their_bucket(tmp_path):
  pairs = [(" ".join("7" * n), " ".join("8" * n)) for n in range(1, 30)] * 20
  raw = tf.data.Dataset.from_tensor_slices(tuple(map(list, zip(*pairs))))
  tok = _tokenizer(tmp_path, ["7 8"] * 10)
  batches = list(
    data.seq2seq_dataset(
      raw,
      tok,
      tok,
      batch_size=8,
      max_length=40,
      batch_tokens=160,
      multiple_of=2,
      pad_to_bucket=True,
      drop_remainder=True,
    )
  )
  shapes = {tuple(b["source"].shape) for b in batches}
  # One shape per bucket: (160 // length rounded down to even, bucket length).
  assert shapes <= {(20, 8), (10, 16), (4, 32), (4, 40)}
  assert len(shapes) >= 3
  for batch in batches:
    assert batch["source"].shape == batch["target_in"].shape == batch["target_out"].shape
    assert batch["source"].shape[0] * batch["source"].shape[1] <= 160


def test_eval_batches_keep_every_pair_and_the_reference_text(tmp_path):
  pairs = [("7 " * n, f"Eight x{n}!") for n in range(1, 30)]
  raw = tf.data.Dataset.from_tensor_slices(tuple(map(list, zip(*pairs))))
  tok = _tokenizer(tmp_path, ["7 8 Eight x!"] * 10)
  batches = list(data.seq2seq_dataset(raw, tok, tok, batch_size=8, max_length=20, keep_text=True))
  texts = [t.decode() for batch in batches for t in batch["target_text"].numpy()]
  assert sorted(texts) == sorted(t for _, t in pairs)  # long pairs truncated, not dropped
  assert max(int(b["source"].shape[1]) for b in batches) <= 20


def test_classification_truncates_on_the_chosen_side(tmp_path):
  tok = _tokenizer(tmp_path, ["1 2 3 4 5 6 7 8 9"] * 10)
  raw = tf.data.Dataset.from_tensor_slices((["123456789"], [1]))
  first = next(iter(data.classification_dataset(raw, tok, 1, 3, truncate="right")))
  last = next(iter(data.classification_dataset(raw, tok, 1, 3, truncate="left")))
  assert tok.detokenize(first["source"]).numpy()[0] == b"123"
  assert tok.detokenize(last["source"]).numpy()[0] == b"789"


def test_a_label_keeps_the_type_its_kind_names(tmp_path):
  """Class ids are int64 by default; a kind whose label is a real number keeps it whole."""
  tok = _tokenizer(tmp_path, ["1 2 3"] * 10)
  raw = tf.data.Dataset.from_tensor_slices((["12", "3"], [0.25, -1.5]))
  classes = tf.data.Dataset.from_tensor_slices((["1"], [2]))
  ids = next(iter(data.classification_dataset(classes, tok, 2, 3)))
  numbers = next(iter(data.classification_dataset(raw, tok, 2, 3, label_dtype=tf.float32)))
  assert ids["label"].dtype == tf.int64 and ids["label"].numpy().tolist() == [2]
  assert numbers["label"].dtype == tf.float32
  assert sorted(numbers["label"].numpy().tolist()) == [-1.5, 0.25]


@pytest.mark.slow
def test_seq2seq_evaluation_reports_exact_match_token_accuracy_and_bleu(trained_run):
  config = tfattn.TransformerConfig.from_json((trained_run / "model_config.json").read_text())
  model = tfattn.Transformer(config)
  tf.train.Checkpoint(model=model).read(
    tf.train.latest_checkpoint(str(trained_run / "checkpoints"))
  ).expect_partial()
  source, target = (
    text.load_tokenizer(text.tokenizer_path(str(trained_run / "vocab"), side))
    for side in ("source", "target")
  )
  raw = builtin_task("numbers", num_train=10, num_eval=12, num_test=1).validation()
  dataset = data.seq2seq_dataset(raw, source, target, batch_size=4, max_length=24, keep_text=True)
  for options in (DecodeOptions(strategy="greedy"), DecodeOptions(beam_size=2)):
    metrics = evaluation.evaluate_seq2seq(model, dataset, target, 8, options)
    assert metrics["examples"] == 8 and metrics["decode"] == options.to_dict()
    for name in ("exact_match", "token_accuracy", "bleu", "bleu_lowercase"):
      assert isinstance(metrics[name], float), name
    assert 0.0 <= metrics["exact_match"] <= 1.0 and 0.0 <= metrics["bleu"] <= 100.0
    assert metrics["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    json.dumps(metrics)  # written to eval.json


def test_seq2seq_evaluation_metrics_on_known_hypotheses(monkeypatch):
  """Hand-built hypotheses and teacher-forced predictions with known exact match, token accuracy
  and BLEU. The decoder is replaced by a table (the trained-run test above runs the real one):
  hypothesis i is `hypotheses[i]`, and the "model" predicts each target_in token as the output."""
  hypotheses = ["a b c d", "x y z w", "The cat sat on the mat.", "never judged"]
  references = ["a b c d", "x y z v", "the cat sat on the mat.", "never judged"]

  class TableTokenizer:
    def detokenize(self, ids):  # ids [batch, 1]: the row's index into `hypotheses`
      return tf.constant([hypotheses[int(i)] for i in ids[:, 0].numpy()])

  monkeypatch.setattr(evaluation, "make_decoder", lambda model, options: lambda s: s[:, :1])
  # target_in vs target_out, padding 0: row 0 right 2 of 3, row 1 1 of 2, row 2 3 of 3.
  target_in = [[5, 6, 7, 0], [5, 9, 0, 0], [4, 4, 4, 0], [1, 1, 1, 1]]
  target_out = [[5, 6, 8, 0], [5, 8, 0, 0], [4, 4, 4, 0], [2, 2, 2, 2]]
  batches = [
    {
      "source": tf.constant([[r] for r in rows], tf.int32),
      "target_in": tf.constant([target_in[r] for r in rows]),
      "target_out": tf.constant([target_out[r] for r in rows]),
      "target_text": tf.constant([references[r] for r in rows]),
    }
    for rows in ([0, 1], [2, 3])
  ]
  metrics = evaluation.evaluate_seq2seq(
    lambda source, target: tf.one_hot(target, 10),
    batches,
    TableTokenizer(),
    max_examples=3,  # the 4th example is cut, from the metrics and from BLEU
    options=DecodeOptions(strategy="greedy"),
  )
  assert metrics["examples"] == 3
  assert metrics["exact_match"] == pytest.approx(1 / 3)  # "The" vs "the" is a miss
  assert metrics["token_accuracy"] == pytest.approx(6 / 8)
  bleu = sacrebleu.corpus_bleu(hypotheses[:3], [references[:3]])
  assert metrics["bleu"] == pytest.approx(bleu.score) and 0 < metrics["bleu"] < 100
  lowercased = sacrebleu.corpus_bleu(hypotheses[:3], [references[:3]], lowercase=True)
  assert metrics["bleu_lowercase"] == pytest.approx(lowercased.score)
  assert metrics["bleu_lowercase"] > metrics["bleu"]


def test_bleu_of_an_identical_corpus_is_100_and_case_counts():
  references = ["The cat sat on the mat.", "Hello, World!", "Ein Haus am See."]
  assert evaluation.bleu_scores(references, references)["bleu"] == pytest.approx(100.0)
  lowered = evaluation.bleu_scores([r.lower() for r in references], references)
  assert lowered["bleu_lowercase"] == pytest.approx(100.0) and lowered["bleu"] < 60.0
  assert lowered["bleu_lowercase_signature"].startswith("nrefs:1|case:lc")


def test_each_epoch_reads_every_example_once_in_a_new_seeded_order():
  size = 1000
  raw = tf.data.Dataset.from_tensor_slices(([str(i) for i in range(size)], list(range(size))))

  def epochs(seed, repeat=True):
    stream = data.shuffled(raw, seed, repeat=repeat).take(3 * size if repeat else size + 1)
    labels = [int(y) for _, y in stream]
    return [labels[i : i + size] for i in range(0, len(labels), size)]

  first = epochs(seed=3)
  for epoch in first:
    assert sorted(epoch) == list(range(size))  # a permutation: each example once
  assert first[0] != list(range(size)) and first[0] != first[1] != first[2]
  assert epochs(seed=3) == first and epochs(seed=4)[0] != first[0]
  assert epochs(seed=3, repeat=False) == first[:1]  # no repeat: one epoch, then the end
  # The components stay together.
  assert all(int(s) == y for s, y in data.shuffled(raw, 3).take(50).as_numpy_iterator())


def test_the_order_keeps_no_trace_of_the_files_order():
  """Over 20 epochs, as a uniform permutation: about one example a epoch left in place, and the
  first tenth of an epoch drawn from either half of a sorted set alike (TensorFlow's
  index_shuffle with the seed as its key and 4 rounds kept 52 of 100 in place)."""
  for size in (10, 100, 1000):
    raw = tf.data.Dataset.from_tensor_slices(list(range(size)))
    epochs = np.array(list(data.shuffled(raw, 0, repeat=True).take(20 * size))).reshape(20, size)
    in_place = np.mean([np.sum(epoch == np.arange(size)) for epoch in epochs])
    assert in_place < 2, (size, in_place)
    if size >= 100:
      first_half = np.mean([np.mean(epoch[: size // 10] < size // 2) for epoch in epochs])
      assert 0.4 < first_half < 0.6, (size, first_half)


def test_a_training_iterator_checkpoint_saves_a_position_not_the_examples(tmp_path):
  """A shuffle buffer of the same 20,000 examples is saved slot by slot (~4 MB); the permuted
  stream's state is a counter, and restoring it gives the same next examples."""

  def stream():
    raw = tf.data.Dataset.from_tensor_slices(([f"example {i}" for i in range(20_000)],))
    return iter(data.shuffled(raw, seed=5, repeat=True).batch(7))

  iterator = stream()
  for _ in range(3000):  # into the second epoch
    next(iterator)
  path = tf.train.Checkpoint(data=iterator).write(str(tmp_path / "ckpt"))
  size = sum(f.stat().st_size for f in tmp_path.iterdir())
  assert size < 100_000, size  # at most one block of 512 examples (44.5 KB here)
  restored = stream()
  tf.train.Checkpoint(data=restored).read(path).assert_consumed()
  for _ in range(20):
    assert next(restored)[0].numpy().tolist() == next(iterator)[0].numpy().tolist()


def test_sorted_data_is_shuffled_whole():
  """A TSV sorted by label must not feed one class for thousands of steps."""
  labels = [0] * 15000 + [1] * 15000  # more than a 10k buffer would mix
  raw = tf.data.Dataset.from_tensor_slices((["x"] * 30000, labels))
  first = [int(y) for _, y in data.shuffled(raw, seed=1).take(100)]
  assert 20 <= sum(first) <= 80
