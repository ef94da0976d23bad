"""train.tasks: TFDS tasks through their real builders on locally prepared data, their split
slices and offline failures; built-in tasks; TSV files; the three data roles."""

import dataclasses
import os
import socket
import time

import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from tfattn import text
from train import data, tasks, tfds_tasks, tokenizer
from train.batching import Packing
from train.builtin_tasks import builtin_task
from train.run_config import RunConfig

from tfds_helpers import FAKE_ROWS, prepare_fake_tfds
from train_helpers import free_ports, own_lines

# Datasets of (source, target) or (text, label) examples; tiny_shakespeare (one text a split)
# has its own test below.
PAIRED = [name for name in tasks.TFDS_TASKS if tfds_tasks.DATASETS[name].separator is None]


@pytest.mark.parametrize("name", tasks.TFDS_TASKS)
def test_tfds_builders_import_and_describe_their_data(name, tmp_path):
  builder = tfds.builder(tfds_tasks.DATASETS[name].builder_name, data_dir=str(tmp_path))
  assert set(tfds_tasks.DATASETS[name].features) <= set(builder.info.features)
  if name in PAIRED:
    assert len(builder.info.supervised_keys) == 2
  assert not builder.is_prepared()


def _rows(dataset):
  return sorted(
    (s.decode(), t.decode() if isinstance(t, bytes) else int(t))
    for s, t in dataset.as_numpy_iterator()
  )


@pytest.mark.parametrize("name", PAIRED)
def test_tfds_tasks_read_locally_prepared_data_in_three_roles(name, tmp_path):
  spec = tfds_tasks.DATASETS[name]
  prepare_fake_tfds(spec.builder_name, tmp_path / "tfds")
  task = tasks.get_task(RunConfig.of(task=name, data_dir=str(tmp_path / "tfds")).data)
  rows = FAKE_ROWS[spec.builder_name]
  if spec.builder:  # the other direction of the builder's pairs
    rows = {split: [(b, a) for a, b in pairs] for split, pairs in rows.items()}
  assert task.kind == spec.kind and task.num_classes == spec.num_classes
  train, validation, test = (_rows(role()) for role in (task.train, task.validation, task.test))
  assert test == sorted(rows["test"])
  if name == "imdb_reviews":  # validation is held out from train: together they are train
    assert (
      len(validation) == len(rows["train"]) // 10 + 1 or len(validation) == len(rows["train"]) // 10
    )
    assert sorted(train + validation) == sorted(rows["train"])
  else:
    assert train == sorted(rows["train"]) and validation == sorted(rows["validation"])
  vocab = tokenizer.learn_and_write(
    tokenizer.SENTENCEPIECE, task.train().map(lambda s, t: s), 300, str(tmp_path / "vocab")
  )
  tok = text.load_tokenizer(vocab)
  if task.kind == tasks.CLASSIFICATION:
    batch = next(iter(data.classification_dataset(task.test(), tok, 4, 32, truncate="left")))
    assert batch["label"].dtype == tf.int64 and batch["source"].dtype == tf.int32
  else:
    batch = next(iter(data.seq2seq_dataset(task.validation(), tok, tok, 4, 64, keep_text=True)))
    assert batch["source"].shape[0] == 4
    assert batch["target_text"].numpy()[0].decode() == rows["validation"][0][1]


def test_tfds_split_flags_override_the_table_and_are_checked(tmp_path):
  name = "ted_hrlr_translate/pt_to_en"
  prepare_fake_tfds(name, tmp_path / "tfds")
  task = tasks.get_task(
    RunConfig.of(
      task=name,
      data_dir=str(tmp_path / "tfds"),
      train_split="train[:50%]",
      validation_split="test",
      test_split="",
    ).data
  )
  assert len(_rows(task.train())) == len(FAKE_ROWS[name]["train"]) // 2
  assert _rows(task.validation()) == sorted(FAKE_ROWS[name]["test"])
  assert task.test is None
  with pytest.raises(ValueError, match="has no split 'dev'"):
    tasks.get_task(RunConfig.of(task=name, data_dir=str(tmp_path / "tfds"), test_split="dev").data)


def test_unprepared_tfds_data_fails_fast_offline_naming_data_dir(tmp_path, monkeypatch):
  closed = ("127.0.0.1", free_ports(1)[0])
  monkeypatch.setitem(
    tfds_tasks.DATASETS,
    "imdb_reviews",
    dataclasses.replace(tfds_tasks.DATASETS["imdb_reviews"], download_host=closed),
  )
  started = time.time()
  with pytest.raises(tfds_tasks.DataUnavailableError) as raised:
    tasks.get_task(RunConfig.of(task="imdb_reviews", data_dir=str(tmp_path)).data)
  message = str(raised.value)
  assert time.time() - started < 30
  assert "\n" not in message and str(tmp_path) in message
  assert "tfds build imdb_reviews --data_dir=DIR" in message


def test_reachable_is_bounded_in_time():
  with socket.socket() as listening:
    listening.bind(("127.0.0.1", 0))
    listening.listen()
    assert tfds_tasks.reachable("127.0.0.1", listening.getsockname()[1])
  assert not tfds_tasks.reachable("127.0.0.1", free_ports(1)[0])


def test_builtin_tasks_are_deterministic_and_hold_out_validation_and_test():
  first = builtin_task("reverse", seed=3, num_train=500, num_eval=50, num_test=40)
  second = builtin_task("reverse", seed=3, num_train=500, num_eval=50, num_test=40)

  def as_list(ds):
    return [(s.numpy(), t.numpy()) for s, t in ds]

  for role in ("train", "validation", "test"):
    assert as_list(getattr(first, role)()) == as_list(getattr(second, role)())
  train_sources = {s for s, _ in as_list(first.train())}
  validation, test = as_list(first.validation()), as_list(first.test())
  assert len(validation) == 50 and len(test) == 40
  validation_sources, test_sources = {s for s, _ in validation}, {s for s, _ in test}
  assert not train_sources & validation_sources and not train_sources & test_sources
  assert not validation_sources & test_sources
  source, target = validation[0]
  assert source.decode().split()[::-1] == target.decode().split()


def test_adding_the_test_role_left_train_and_validation_unchanged():
  """Runs saved before the test role existed resume on the same examples: the test examples
  come from their own random stream."""
  from train.builtin_tasks import MAKERS, _can_hold_out, held_out_split

  task = builtin_task("numbers", seed=0, num_train=300, num_eval=30, num_test=30)
  train, validation = held_out_split(MAKERS["numbers"], 0, 300, 30, _can_hold_out("numbers"))
  assert _rows(task.train()) == sorted(train)
  assert _rows(task.validation()) == sorted(validation)


def test_tsv_task_roles(tmp_path):
  (tmp_path / "train.tsv").write_text("a\tA\nb\tB\n")
  (tmp_path / "val.tsv").write_text("c\tC\n")
  (tmp_path / "test.tsv").write_text("d\tD\ne\tE\n")
  task = tasks.get_task(
    RunConfig.of(
      task="tsv",
      train_file=str(tmp_path / "train.tsv"),
      validation_file=str(tmp_path / "val.tsv"),
      test_file=str(tmp_path / "test.tsv"),
    ).data
  )
  assert _rows(task.validation()) == [("c", "C")] and len(_rows(task.test())) == 2
  assert not task.validation_note
  unheld = tasks.get_task(RunConfig.of(task="tsv", train_file=str(tmp_path / "train.tsv")).data)
  assert unheld.test is None and _rows(unheld.validation()) == [("a", "A"), ("b", "B")]
  assert "not held out" in unheld.validation_note


def test_tsv_classification_task_counts_classes(tmp_path):
  path = tmp_path / "train.tsv"
  path.write_text("good film\t2\nbad film\t0\nok film\t1\n")
  task = tasks.get_task(
    RunConfig.of(task="tsv", train_file=str(path), tsv_kind="classification").data
  )
  assert task.num_classes == 3 and task.defaults["truncate"] == "left"


@pytest.mark.parametrize(
  "content,kind,message",
  [
    ("a\tb\nno tab here\n", "seq2seq", ":2: expected 2 tab-separated fields"),
    ("good\t1\nbad\tpositive\n", "classification", ":2: label 'positive' is not an integer"),
    ("", "seq2seq", "no examples"),
  ],
)
def test_tsv_errors_name_file_and_line(tmp_path, content, kind, message):
  path = tmp_path / "data.tsv"
  path.write_text(content)
  with pytest.raises(ValueError, match=message):
    tasks.get_task(RunConfig.of(task="tsv", train_file=str(path), tsv_kind=kind).data)


@pytest.mark.slow
def test_train_cli_without_tfds_data_offline_is_one_line_and_exit_2(tmp_path):
  import subprocess

  import warm_start
  from train_helpers import REPO, environment

  if tfds_tasks.reachable(*tfds_tasks.DATASETS["imdb_reviews"].download_host):
    pytest.skip("this machine can download the data; the offline path is tested in-process")
  started = time.time()
  result = subprocess.run(
    [
      *warm_start.python(),
      "-m",
      "train",
      "--task=imdb_reviews",
      f"--data_dir={tmp_path}/tfds",
      f"--run_dir={tmp_path}/run",
    ],
    cwd=REPO,
    env=environment(),
    capture_output=True,
    text=True,
    timeout=120,
  )
  assert result.returncode == 2
  assert time.time() - started < 60
  errors = [line for line in own_lines(result.stderr) if "error" in line.lower()]
  assert len(errors) == 1 and errors[0].startswith("train: error: "), result.stderr[-2000:]
  assert "tfds build imdb_reviews" in errors[0]
  assert not os.path.exists(tmp_path / "run")  # a failed start leaves no run directory
  assert "Traceback" not in result.stderr


def test_tiny_shakespeare_is_a_language_model_task_of_one_speech_an_example(tmp_path):
  """Each TFDS split is one long text: the task yields its speeches (the pieces between blank
  lines), split here in Python as the reference."""
  name = "tiny_shakespeare"
  prepare_fake_tfds(name, tmp_path / "tfds")
  task = tasks.get_task(RunConfig.of(task=name, data_dir=str(tmp_path / "tfds")).data)
  assert task.kind == "language_model" and task.defaults["max_length"] == 128
  for role in ("train", "validation", "test"):
    (whole,) = FAKE_ROWS[name][role][0]
    speeches = [piece for piece in whole.split("\n\n") if piece.strip()]
    assert _rows(getattr(task, role)()) == sorted((s, s) for s in speeches)


def test_a_text_file_is_a_language_model_task_of_one_line_an_example(tmp_path):
  (tmp_path / "train.txt").write_text("the cat\n\n  \nthe dog runs\n", encoding="utf-8")
  (tmp_path / "bad.txt").write_bytes(b"fine\n\xff\n")
  task = tasks.get_task(
    RunConfig.of(task="text", train_file=str(tmp_path / "train.txt"), text_packing="lines").data
  )
  assert task.kind == "language_model" and task.test is None
  assert _rows(task.train()) == [("the cat", 1), ("the dog runs", 1)]  # each ends a document
  assert "not held out" in task.validation_note
  assert task.packing == Packing(text="lines")
  with pytest.raises(ValueError, match=r"bad\.txt:2: not valid UTF-8"):
    tasks.get_task(RunConfig.of(task="text", train_file=str(tmp_path / "bad.txt")).data)


def test_a_packed_text_file_streams_its_lines_with_their_newlines(tmp_path):
  """--text_packing=blocks (the default): a file is one document whose newlines are text,
  blank lines included; each line comes with the newline before it, and a last newline ends
  the document. With --text_documents=line each non-blank line is a document."""
  (tmp_path / "a.txt").write_text("the cat\n\nthe dog runs\n", encoding="utf-8")
  (tmp_path / "b.txt").write_text("a bird\n", encoding="utf-8")
  files = f"{tmp_path}/a.txt,{tmp_path}/b.txt"
  task = tasks.get_task(RunConfig.of(task="text", train_file=files, validation_file=files).data)
  pieces = [(t.decode(), bool(e)) for t, e in task.validation().as_numpy_iterator()]
  assert pieces == [
    *[("the cat", False), ("\n", False), ("\nthe dog runs", False), ("\n", True)],
    *[("a bird", False), ("\n", True)],
  ]
  assert "".join(t for t, _ in pieces) == "the cat\n\nthe dog runs\na bird\n"  # lossless
  assert task.packing.text == "blocks" and task.validation_note == ""
  by_line = tasks.get_task(
    RunConfig.of(
      task="text", train_file=files, text_packing="documents", text_documents="line"
    ).data
  )
  # (Training reads the files in an order shuffled from the seed.)
  assert _rows(by_line.train()) == [("a bird", 1), ("the cat", 1), ("the dog runs", 1)]
  with pytest.raises(ValueError, match=r"text file .*nope\.txt does not exist"):
    tasks.get_task(RunConfig.of(task="text", train_file=str(tmp_path / "nope.txt")).data)
