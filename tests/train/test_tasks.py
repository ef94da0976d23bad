"""train.tasks: TFDS tasks through their real builders on locally prepared data, offline
failures, TSV files."""

import os
import socket
import time

import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from tfattn import text
from train import data, tasks, tokenizer

from tfds_helpers import FAKE_ROWS, prepare_fake_tfds
from train_helpers import free_ports


@pytest.mark.parametrize("name", tasks.TFDS_TASKS)
def test_tfds_builders_import_and_describe_their_data(name, tmp_path):
  builder = tfds.builder(name, data_dir=str(tmp_path))
  assert len(builder.info.supervised_keys) == 2
  assert not builder.is_prepared()


@pytest.mark.parametrize("name", tasks.TFDS_TASKS)
def test_tfds_tasks_read_locally_prepared_data(name, tmp_path):
  prepare_fake_tfds(name, tmp_path / "tfds")
  task = tasks.get_task(name, data_dir=str(tmp_path / "tfds"))
  rows = FAKE_ROWS[name]
  train = list(task.train().as_numpy_iterator())
  assert sorted(train) == sorted((s.encode(), t.encode() if isinstance(t, str) else t)
                                 for s, t in rows["train"])
  vocab = tokenizer.learn_and_write(tokenizer.SENTENCEPIECE, task.train().map(lambda s, t: s),
                                    300, str(tmp_path / "vocab"))
  tok = text.load_tokenizer(vocab)
  if task.kind == tasks.CLASSIFICATION:
    assert len(list(task.eval())) == len(rows["test"])
    batch = next(iter(data.classification_dataset(task.eval(), tok, 4, 32, truncate="left")))
    assert batch["label"].dtype == tf.int64 and batch["source"].dtype == tf.int32
  else:
    assert len(list(task.eval())) == len(rows["validation"])
    batch = next(iter(data.seq2seq_dataset(task.eval(), tok, tok, 4, 64, keep_text=True)))
    assert batch["source"].shape[0] == 4
    assert batch["target_text"].numpy()[0].decode() == rows["validation"][0][1]


def test_unprepared_tfds_data_fails_fast_offline_naming_data_dir(tmp_path, monkeypatch):
  closed = ("127.0.0.1", free_ports(1)[0])
  monkeypatch.setitem(tasks.TFDS_DOWNLOAD_HOSTS, "imdb_reviews", closed)
  started = time.time()
  with pytest.raises(tasks.DataUnavailableError) as raised:
    tasks.get_task("imdb_reviews", data_dir=str(tmp_path))
  message = str(raised.value)
  assert time.time() - started < 30
  assert "\n" not in message and str(tmp_path) in message
  assert "tfds build imdb_reviews --data_dir=DIR" in message


def test_reachable_is_bounded_in_time():
  with socket.socket() as listening:
    listening.bind(("127.0.0.1", 0))
    listening.listen()
    assert tasks.reachable("127.0.0.1", listening.getsockname()[1])
  assert not tasks.reachable("127.0.0.1", free_ports(1)[0])


def test_builtin_tasks_are_deterministic_and_hold_out_eval():
  first = tasks.builtin_task("reverse", seed=3, num_train=500, num_eval=50)
  second = tasks.builtin_task("reverse", seed=3, num_train=500, num_eval=50)
  def as_list(ds):
    return [(s.numpy(), t.numpy()) for s, t in ds]
  assert as_list(first.train()) == as_list(second.train())
  train_sources = {s for s, _ in as_list(first.train())}
  eval_pairs = as_list(first.eval())
  assert len(eval_pairs) == 50 and not train_sources & {s for s, _ in eval_pairs}
  source, target = eval_pairs[0]
  assert source.decode().split()[::-1] == target.decode().split()


def test_tsv_classification_task_counts_classes(tmp_path):
  path = tmp_path / "train.tsv"
  path.write_text("good film\t2\nbad film\t0\nok film\t1\n")
  task = tasks.get_task("tsv", train_file=str(path), tsv_kind="classification")
  assert task.num_classes == 3 and task.defaults["truncate"] == "left"


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


@pytest.mark.slow
def test_train_cli_without_tfds_data_offline_is_one_line_and_exit_2(tmp_path):
  import subprocess
  import sys

  from train_helpers import REPO, environment
  if tasks.reachable(*tasks.TFDS_DOWNLOAD_HOSTS["imdb_reviews"]):
    pytest.skip("this machine can download the data; the offline path is tested in-process")
  started = time.time()
  result = subprocess.run(
      [sys.executable, "-m", "train", "--task=imdb_reviews", f"--data_dir={tmp_path}/tfds",
       f"--run_dir={tmp_path}/run"], cwd=REPO, env=environment(), capture_output=True,
      text=True, timeout=120)
  assert result.returncode == 2
  assert time.time() - started < 60
  errors = [line for line in result.stderr.splitlines() if "error" in line.lower()]
  assert len(errors) == 1 and errors[0].startswith("train: error: "), result.stderr[-2000:]
  assert "tfds build imdb_reviews" in errors[0]
  assert not os.path.exists(tmp_path / "run")  # a failed start leaves no run directory
  assert "Traceback" not in result.stderr
