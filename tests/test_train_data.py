"""Tasks, TF-Text tokenizers and tf.data pipelines (in-process, no network)."""

import subprocess
import sys

import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from train import data, tasks, tokenizer
from train.number_words import number_to_words
from train.run_config import RunConfig
from train_helpers import REPO, environment


@pytest.mark.parametrize("n,words", [
    (0, "zero"), (7, "seven"), (13, "thirteen"), (40, "forty"), (99, "ninety nine"),
    (100, "one hundred"), (1234, "one thousand two hundred thirty four"),
    (1_000_001, "one million one"), (900_019, "nine hundred thousand nineteen")])
def test_number_to_words(n, words):
  assert number_to_words(n) == words


def test_builtin_tasks_are_deterministic_and_hold_out_eval():
  first = tasks.builtin_task("reverse", seed=3, num_train=500, num_eval=50)
  second = tasks.builtin_task("reverse", seed=3, num_train=500, num_eval=50)
  as_list = lambda ds: [(s.numpy(), t.numpy()) for s, t in ds]
  assert as_list(first.train()) == as_list(second.train())
  train_sources = {s for s, _ in as_list(first.train())}
  eval_pairs = as_list(first.eval())
  assert len(eval_pairs) == 50 and not train_sources & {s for s, _ in eval_pairs}
  source, target = eval_pairs[0]
  assert source.decode().split()[::-1] == target.decode().split()


def _vocab_file(tmp_path, texts, vocab_size=200):
  vocab = tokenizer.learn_vocabulary(tf.data.Dataset.from_tensor_slices(texts), vocab_size)
  path = str(tmp_path / "vocab.txt")
  tokenizer.write_vocabulary(vocab, path)
  return path


def test_tokenizer_round_trips_unicode_text(tmp_path):
  corpus = ["Olá, mundo! Ça va très bien.", "Привет, мир — 2024 год.", "東京は晴れ。",
            "naïve café résumé", "Grüße aus Köln"] * 20
  tok = tokenizer.TextTokenizer(_vocab_file(tmp_path, corpus))
  ids = tok.tokenize(corpus[:5])
  assert ids.dtype == tf.int32
  restored = tok.detokenize(ids.to_tensor()).numpy()
  expected = tf.strings.reduce_join(tokenizer.split_words(corpus[:5]), axis=-1,
                                    separator=" ").numpy()
  assert list(restored) == list(expected)
  assert restored[1].decode() == "привет , мир — 2 0 2 4 год ."
  assert tokenizer.UNK.encode() not in b" ".join(restored)


def test_tokenizer_keeps_unknown_tokens_visible_and_stops_at_end(tmp_path):
  tok = tokenizer.TextTokenizer(_vocab_file(tmp_path, ["abc def"] * 10))
  ids = tok.tokenize(["abc zzz"]).to_tensor()
  with_end = tf.concat([ids, [[tokenizer.END_ID, 5]]], axis=1)
  assert tok.detokenize(with_end).numpy()[0].decode() == "abc [UNK]"


def test_tokenizer_rejects_a_vocabulary_without_reserved_tokens(tmp_path):
  path = tmp_path / "bad.txt"
  path.write_text("a\nb\n")
  with pytest.raises(ValueError, match="must start with"):
    tokenizer.TextTokenizer(str(path))


def test_seq2seq_batches_are_bucketed_padded_and_framed(tmp_path):
  pairs = [(" ".join("7" * n), " ".join("8" * n)) for n in range(1, 30)] * 4
  raw = tf.data.Dataset.from_tensor_slices(tuple(map(list, zip(*pairs))))
  tok = tokenizer.TextTokenizer(_vocab_file(tmp_path, ["7 8"] * 10))
  batches = list(data.seq2seq_dataset(raw, tok, tok, batch_size=8, max_length=20))
  assert batches
  for batch in batches:
    lengths = tf.reduce_sum(tf.cast(batch["source"] > 0, tf.int32), axis=1)
    assert int(tf.reduce_max(lengths)) <= 20  # too-long examples are filtered out
    assert int(tf.reduce_max(lengths) - tf.reduce_min(lengths)) <= 16  # bucketed
    assert bool(tf.reduce_all(batch["target_in"][:, 0] == tokenizer.START_ID))
    shifted = batch["target_in"][:, 1:]
    assert bool(tf.reduce_all(
        tf.where(shifted > 0, batch["target_out"][:, :-1], 0) == shifted))
    ends = tf.reduce_sum(tf.cast(batch["target_out"] == tokenizer.END_ID, tf.int32), axis=1)
    assert bool(tf.reduce_all(ends == 1))


@pytest.mark.parametrize("name", ["ted_hrlr_translate/pt_to_en", "wmt14_translate/de-en"])
def test_tfds_translation_tasks_on_mock_data(tmp_path, name):
  with tfds.testing.mock_data(num_examples=24):
    task = tasks.get_task(name)
    assert task.kind == tasks.SEQ2SEQ and task.bleu
    source_path = _vocab_file(tmp_path, [s for s, _ in task.train().take(24).as_numpy_iterator()])
    tok = tokenizer.TextTokenizer(source_path)
    batch = next(iter(data.seq2seq_dataset(task.eval(), tok, tok, 4, 64)))
  assert batch["source"].dtype == tf.int32 and batch["source"].shape[0] == 4


def test_tfds_imdb_classification_on_mock_data(tmp_path):
  with tfds.testing.mock_data(num_examples=16):
    task = tasks.get_task("imdb_reviews")
    assert task.kind == tasks.CLASSIFICATION
    texts = [t for t, _ in task.train().as_numpy_iterator()]
    tok = tokenizer.TextTokenizer(_vocab_file(tmp_path, texts))
    batch = next(iter(data.classification_dataset(task.train(), tok, 4, 32)))
  assert batch["label"].dtype == tf.int64 and batch["source"].shape[1] <= 32


@pytest.mark.parametrize("content,kind,message", [
    ("a\tb\nno tab here\n", "seq2seq", ":2: expected 2 tab-separated fields"),
    ("good\t1\nbad\tpositive\n", "classification", ":2: label 'positive' is not an integer"),
    ("", "seq2seq", "no examples"),
])
def test_tsv_errors_name_file_and_line(tmp_path, content, kind, message):
  path = tmp_path / "data.tsv"
  path.write_text(content)
  with pytest.raises(ValueError, match=message):
    tasks.get_task("tsv", train_file=str(path), tsv_kind=kind)


def test_tsv_classification_task_counts_classes(tmp_path):
  path = tmp_path / "train.tsv"
  path.write_text("good film\t2\nbad film\t0\nok film\t1\n")
  task = tasks.get_task("tsv", train_file=str(path), tsv_kind="classification")
  assert task.num_classes == 3


def test_help_documents_every_flag():
  result = subprocess.run([sys.executable, "-m", "train", "--helpfull"], cwd=REPO,
                          env=environment(), capture_output=True, text=True, timeout=120)
  assert result.returncode in (0, 1), result.stderr  # absl exits 1 after printing help
  for field in RunConfig.__dataclass_fields__:
    assert f"--{field}" in result.stdout or f"--[no]{field}" in result.stdout, field


def test_bad_flags_fail_with_a_clear_message(tmp_path):
  path = tmp_path / "x.tsv"
  path.write_text("only one field\n")
  result = subprocess.run(
      [sys.executable, "-m", "train", f"--run_dir={tmp_path}/run", "--task=tsv",
       f"--train_file={path}"], cwd=REPO, env=environment(), capture_output=True, text=True,
      timeout=120)
  assert result.returncode == 2
  assert "expected 2 tab-separated fields" in result.stderr
  assert "Traceback" not in result.stderr


def test_seq2seq_evaluation_reports_exact_match_token_accuracy_and_bleu(trained_run):
  import json
  import tfattn
  from train import evaluation
  config = tfattn.TransformerConfig.from_json((trained_run / "model_config.json").read_text())
  model = tfattn.Transformer(config)
  tf.train.Checkpoint(model=model).read(
      tf.train.latest_checkpoint(str(trained_run / "checkpoints"))).expect_partial()
  source = tokenizer.TextTokenizer(str(trained_run / "vocab" / "source.txt"))
  target = tokenizer.TextTokenizer(str(trained_run / "vocab" / "target.txt"))
  raw = tasks.builtin_task("numbers", num_train=10, num_eval=12).eval()
  dataset = data.seq2seq_dataset(raw, source, target, batch_size=4, max_length=24)
  metrics = evaluation.evaluate_seq2seq(model, dataset, target, max_examples=8, bleu=True)
  assert metrics["examples"] == 8
  for name in ("exact_match", "token_accuracy", "bleu"):
    assert isinstance(metrics[name], float), name
  assert 0.0 <= metrics["exact_match"] <= 1.0 and 0.0 <= metrics["bleu"] <= 100.0
  json.dumps(metrics)  # written to eval.json
