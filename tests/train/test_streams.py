"""train.streams and the streamed TSV/TFRecord task: file lists and globs, checks in the
pipeline (fail or skip), file order from the seed, exact resume from an iterator checkpoint,
shards per worker, the vocabulary's reservoir sample and the shared vocabulary."""

import json
import pathlib

import numpy as np
import pytest
import tensorflow as tf

from tfattn import text
from tfattn.support.run_dir import RunDir
from train import data, kinds, streams, tsv_tasks, vocabularies
from train.run_config import RunConfig
from train.tasks import get_task

SEQ2SEQ = kinds.of("seq2seq")


def _write(path, lines):
  path.write_bytes(b"".join(line + b"\n" for line in lines))
  return str(path)


def _pairs(dataset):
  return [
    (a.decode(), b.decode() if isinstance(b, bytes) else int(b))
    for a, b in dataset.as_numpy_iterator()
  ]


@pytest.fixture
def shards(tmp_path):
  """Three TSV shards of 40 numbered pairs each (one blank line in the first)."""
  paths = []
  for shard in range(3):
    lines = [f"s{shard}-{i}\tt{shard}-{i}".encode() for i in range(40)]
    if shard == 0:
      lines.insert(5, b"   ")
    paths.append(_write(tmp_path / f"part-{shard}.tsv", lines))
  return paths


def test_a_glob_and_a_comma_list_name_the_same_files(shards, tmp_path):
  glob = str(tmp_path / "part-*.tsv")
  assert streams.expand(glob, "train_file") == shards
  assert streams.expand(f"{shards[2]}, {shards[0]},{shards[2]}", "train_file") == [
    shards[2],
    shards[0],
  ]
  with pytest.raises(ValueError, match="--train_file: no file matches"):
    streams.expand(str(tmp_path / "nothing-*.tsv"), "train_file")
  (tmp_path / "x.tfrecord").write_bytes(b"")
  with pytest.raises(ValueError, match="mixes TSV and TFRecord"):
    streams.expand(f"{glob},{tmp_path / 'x.tfrecord'}", "train_file")


def test_streamed_examples_are_every_line_in_a_seeded_file_order(shards):
  everything = sorted((f"s{shard}-{i}", f"t{shard}-{i}") for shard in range(3) for i in range(40))
  in_order = _pairs(streams.examples(shards, SEQ2SEQ))
  assert sorted(in_order) == everything  # the blank line is skipped
  assert in_order[:40] == [(f"s0-{i}", f"t0-{i}") for i in range(40)]  # blocks of 1024 lines
  seeded = _pairs(streams.examples(shards, SEQ2SEQ, seed=3))
  assert seeded == _pairs(streams.examples(shards, SEQ2SEQ, seed=3))
  assert sorted(seeded) == everything
  orders = {tuple(_pairs(streams.examples(shards, SEQ2SEQ, seed=s))[:1]) for s in range(4)}
  assert len(orders) > 1  # the seed changes which file comes first


def test_a_bad_line_past_the_checked_head_fails_naming_file_and_line(tmp_path, monkeypatch):
  monkeypatch.setattr(tsv_tasks, "HEAD_LINES", 3)
  lines = [b"a\tA"] * 5 + [b"two\ttabs\there", b"b\tB", b"caf\xe9\tC"]
  path = _write(tmp_path / "train.tsv", lines)
  task = get_task(RunConfig.of(task="tsv", train_file=path).data)  # the head (3 lines) is fine
  with pytest.raises(ValueError, match=r"train.tsv:6: expected 2 tab-separated fields, got 3"):
    streams.run_stream(lambda: _pairs(task.train()))


def test_skipped_bad_lines_are_named_and_counted(tmp_path, capfd):
  lines = [b"a\tA", b"two\ttabs\there", b"b\tB", b"caf\xe9\tC", b"c\tC"]
  path = _write(tmp_path / "train.tsv", lines)
  task = get_task(RunConfig.of(task="tsv", train_file=path, bad_lines="skip").data)
  assert _pairs(task.train()) == [("a", "A"), ("b", "B"), ("c", "C")]
  printed = capfd.readouterr().err
  assert "skipped bad line " + path + ":2: expected 2 tab-separated fields, got 3" in printed
  assert path + ":4: not valid UTF-8" in printed and "(2 so far)" in printed


def test_classification_labels_are_checked_in_the_pipeline(tmp_path, monkeypatch, capfd):
  path = _write(tmp_path / "train.tsv", [b"good\t1", b"fine\t+2", b"bad\t0", b"odd\tx7", b"new\t5"])
  with pytest.raises(ValueError, match=r"train.tsv:4: label 'x7' is not an integer"):
    get_task(RunConfig.of(task="tsv", train_file=path, tsv_kind="classification").data)
  monkeypatch.setattr(tsv_tasks, "HEAD_LINES", 2)  # past the head, the pipeline's words
  task = get_task(RunConfig.of(task="tsv", train_file=path, tsv_kind="classification").data)
  assert task.num_classes == 3  # counted on the checked head (labels 1 and 2)
  with pytest.raises(ValueError, match=r"train.tsv:4: the label must be an integer >= 0"):
    streams.run_stream(lambda: _pairs(task.train()))
  config = RunConfig.of(task="tsv", train_file=path, tsv_kind="classification", bad_lines="skip")
  assert _pairs(get_task(config.data).train()) == [("good", 1), ("fine", 2), ("bad", 0)]
  assert "train.tsv:5: the label must be an integer >= 0 and below 3" in capfd.readouterr().err


def test_tfrecord_files_stream_tf_examples(tmp_path):
  path = tmp_path / "train.tfrecord"
  with tf.io.TFRecordWriter(str(path)) as writer:
    for source, target in [("hallo", "hello"), ("welt", "world")]:
      features = {
        "source": tf.train.Feature(bytes_list=tf.train.BytesList(value=[source.encode()])),
        "target": tf.train.Feature(bytes_list=tf.train.BytesList(value=[target.encode()])),
      }
      writer.write(
        tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString()
      )
  task = get_task(RunConfig.of(task="tsv", train_file=str(path), validation_file=str(path)).data)
  assert _pairs(task.train()) == [("hallo", "hello"), ("welt", "world")]
  assert _pairs(task.validation()) == [("hallo", "hello"), ("welt", "world")]


def test_a_language_model_reads_tfrecords_of_a_text_feature(tmp_path):
  """`--task=tsv --tsv_kind=language_model --train_file=lm.tfrecord` (issue 40's defect: a
  KeyError, because the TFRecord features were a table keyed by kind that lacked this kind)."""
  path = tmp_path / "lm.tfrecord"
  with tf.io.TFRecordWriter(str(path)) as writer:
    for line in ("ein hund", "eine katze"):
      feature = {"text": tf.train.Feature(bytes_list=tf.train.BytesList(value=[line.encode()]))}
      writer.write(
        tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()
      )
  config = RunConfig.of(task="tsv", tsv_kind="language_model", train_file=str(path))
  task = get_task(config.data)
  assert task.kind == "language_model"
  assert _pairs(task.train()) == [("ein hund", ""), ("eine katze", "")]
  assert _pairs(task.validation()) == [("ein hund", ""), ("eine katze", "")]


def test_the_data_position_restores_exactly_from_a_checkpoint(shards, tmp_path):
  """The trainer checkpoints its input iterator with the model: the stream's file positions,
  interleave and shuffle buffer come back, so a resumed run sees the same batches."""
  tokenizer = text.load_tokenizer(
    vocabularies.tokenizer.learn_and_write(
      "sentencepiece",
      streams.examples(shards, SEQ2SEQ).map(lambda s, t: s),
      60,
      str(tmp_path / "vocab"),
    )
  )

  def batches():
    raw = streams.examples(shards, SEQ2SEQ, seed=1)
    return data.seq2seq_dataset(
      raw, tokenizer, tokenizer, 8, 16, shuffle_seed=1, repeat=True, drop_remainder=True
    )

  iterator = iter(batches())
  for _ in range(7):
    next(iterator)
  saved = tf.train.Checkpoint(data=iterator).write(str(tmp_path / "ckpt" / "data"))
  expected = [next(iterator)["source"].numpy() for _ in range(20)]  # across an epoch's end
  resumed = iter(batches())
  tf.train.Checkpoint(data=resumed).read(saved).assert_consumed()
  for want in expected:
    np.testing.assert_array_equal(next(resumed)["source"].numpy(), want)


def test_each_worker_reads_its_own_files_and_too_few_files_fail_first(shards, monkeypatch):
  task = get_task(RunConfig.of(task="tsv", train_file=",".join(shards)).data)
  first = {s.split("-")[0] for s, _ in _pairs(task.train_for_worker(2, 0))}
  second = {s.split("-")[0] for s, _ in _pairs(task.train_for_worker(2, 1))}
  assert first == {"s0", "s2"} and second == {"s1"}
  cluster = {"worker": ["127.0.0.1:1", "127.0.0.1:2"]}
  monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": cluster, "task": {"index": 0}}))
  with pytest.raises(ValueError, match="has 1 file\\(s\\) for 2 workers"):
    get_task(RunConfig.of(task="tsv", train_file=shards[0]).data)


def test_the_reservoir_sample_is_bounded_seeded_and_uniform():
  numbers = tf.data.Dataset.range(20_000).map(lambda i: (i, -i))
  first, second = vocabularies.reservoir_sample(numbers, 1000, seed=5)
  assert len(first) == 1000 and len(set(first)) == 1000 and list(second) == [-x for x in first]
  again, _ = vocabularies.reservoir_sample(numbers, 1000, seed=5)
  assert list(again) == list(first)
  assert list(vocabularies.reservoir_sample(numbers, 1000, seed=6)[0]) != list(first)
  # Uniform over the whole stream, not its beginning: each quarter holds ~250.
  quarters = np.bincount(np.asarray(first, dtype=np.int64) // 5000, minlength=4)
  assert all(180 <= q <= 320 for q in quarters), quarters
  small, _ = vocabularies.reservoir_sample(numbers.take(10), 1000, seed=5)
  assert list(small) == list(range(10))  # everything, in order


def test_a_shared_vocabulary_serves_both_sides_and_ties_the_embeddings(shards, tmp_path):
  config = RunConfig.of(
    task="tsv",
    train_file=",".join(shards),
    shared_vocabulary=True,
    vocab_size=80,
    vocab_examples=100,
  )
  task = get_task(config.data)
  config = config.resolved_for(task)
  layout = RunDir(str(tmp_path / "run"))
  sides = ("source", "target")
  tokenizers = vocabularies.learn_or_load(task, sides, config.vocabulary, config.seed, layout)
  source, target = (text.tokenizer_path(layout.vocab, side) for side in ("source", "target"))
  assert pathlib.Path(source).read_bytes() == pathlib.Path(target).read_bytes()
  ids = tokenizers["target"].tokenize(tf.constant(["t1-3s2-7"])).to_tensor()
  assert tokenizers["source"].detokenize(ids).numpy()[0] == b"t1-3s2-7"  # both languages
  model_config = config.model_config(80, 80, 2)
  assert model_config.share_embeddings and model_config.tie_output_embedding
  with pytest.raises(ValueError, match="--shared_vocabulary is for seq2seq"):
    RunConfig.of(shared_vocabulary=True).check(kind="classification")


@pytest.mark.slow
def test_two_workers_on_loopback_read_their_own_files(tmp_path):
  from train_helpers import logged_steps, run_workers

  for shard, letter in enumerate("ab"):
    _write(
      tmp_path / f"part-{shard}.tsv",
      [f"{letter}{i}\t{letter.upper()}{i}".encode() for i in range(64)],
    )
  outputs = run_workers(
    tmp_path / "run", "--task=tsv", f"--train_file={tmp_path}/part-*.tsv", "--train_steps=3"
  )
  for index, output in enumerate(outputs):
    assert f"worker {index} of 2 reads 1 of the 2 training files: part-{index}.tsv" in output
  assert [r["step"] for r in logged_steps(tmp_path / "run")] == [1, 2, 3]
