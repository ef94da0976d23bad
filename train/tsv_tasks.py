"""Local files as a task: `source<TAB>target` (seq2seq) or `text<TAB>label` (classification)
lines, or TFRecord files of tf.train.Examples, per data role (`--train_file`,
`--validation_file`, `--test_file`; each a comma list of paths or globs).

Training files are streamed (`train/streams.py`): memory does not grow with the corpus. The first
`HEAD_LINES` lines of each training file are checked in Python before anything is written, so a
wrong file fails at once with `file:line`; later lines are checked in the pipeline. Validation
and test files are small: they are read whole and checked before training.
"""

import json
import os
from typing import Optional

import tensorflow as tf
from absl import logging

from train import data_files, kinds, streams
from train.task import SEQ2SEQ, Task, strings_dataset

# Without --validation_file, validation reads this many training lines (not held out).
UNHELD_VALIDATION_LINES = 1000
# Lines of each training file checked in Python before the run writes anything.
HEAD_LINES = 1000


def read_tsv(spec: str, kind: str, bad_lines: str = streams.FAIL, flag: str = "train_file"):
  """Every pair of the files `spec` names (a comma list of paths or globs), read whole and
  checked, so a bad line fails with its `file:line` (or, with SKIP, is dropped with a warning);
  the second column is read by the task kind (`TrainingKind.parse_target`)."""
  kind_object = kinds.of(kind)
  pairs, skipped = [], 0
  for path in streams.expand(spec, flag):
    if streams.is_tfrecord(path):
      records = streams.examples([path], kind_object).as_numpy_iterator()
      pairs += [
        tuple(v.decode("utf-8") if isinstance(v, bytes) else int(v) for v in pair)
        for pair in streams.run_stream(lambda records=records: list(records))
      ]
      continue
    with tf.io.gfile.GFile(path, "rb") as f:
      for number, raw in enumerate(f, 1):
        try:
          pair = streams.parse_line(raw, kind_object)
        except ValueError as error:
          if bad_lines == streams.FAIL:
            raise ValueError(f"{path}:{number}: {error}") from None
          logging.warning("skipped bad line %s:%d: %s", path, number, error)
          skipped += 1
          continue
        if pair is not None:
          pairs.append(pair)
  if not pairs:
    raise ValueError(f"{spec}: no examples")
  if skipped:
    logging.warning("--%s: %d bad line(s) skipped", flag, skipped)
  return pairs


def workers_in_tf_config() -> int:
  """Workers (and chief) TF_CONFIG lists; 1 without it."""
  cluster = json.loads(os.environ.get("TF_CONFIG", "{}") or "{}").get("cluster", {})
  return max(len(cluster.get("worker", [])) + len(cluster.get("chief", [])), 1)


def tsv_task(
  train_file: str,
  validation_file: Optional[str] = None,
  test_file: Optional[str] = None,
  kind: str = SEQ2SEQ,
  seed: int = 0,
  bad_lines: str = streams.FAIL,
  num_workers: Optional[int] = None,
) -> Task:
  """Checks the files' heads (and reads the small validation and test files) now; training
  streams. Without a validation file, validation reads the first training lines, which are not
  held out: the start says so. `num_workers` (default: TF_CONFIG's) must not exceed the
  training files."""
  kind_object = kinds.of(kind)  # a ValueError naming the known kinds
  if not train_file:
    raise data_files.needs_train_file("tsv")
  if bad_lines not in streams.BAD_LINE_POLICIES:
    raise ValueError(f"--bad_lines must be one of {streams.BAD_LINE_POLICIES}, got {bad_lines!r}")
  train_files = streams.expand(train_file, "train_file")
  streams.worker_files(train_files, num_workers or workers_in_tf_config(), 0, "train_file")
  head = streams.head(train_files, kind_object, bad_lines, HEAD_LINES)
  if not head:
    raise ValueError(f"{train_file}: no examples")
  validation_pairs = (
    read_tsv(validation_file, kind, bad_lines, "validation_file")
    if validation_file
    else head[:UNHELD_VALIDATION_LINES]
  )
  test_pairs = read_tsv(test_file, kind, bad_lines, "test_file") if test_file else None
  note = (
    ""
    if validation_file
    else f"validation reads the first {len(validation_pairs)} training lines, which are not "
    "held out: pass --validation_file for an honest number"
  )
  targets = [y for _, y in head + validation_pairs + (test_pairs or [])]
  num_classes = kind_object.count_classes(targets)  # None: the targets are not classes
  # Labels past the heads are checked against these classes as they stream.
  checker = streams.LineChecker(kind_object, bad_lines, num_classes)

  def train():
    return streams.examples(train_files, kind_object, bad_lines, seed, checker)

  def train_shard(num_workers: int, index: int):
    mine = streams.worker_files(train_files, num_workers, index, "train_file")
    logging.info(
      "worker %d of %d reads %d of the %d training files: %s",
      index,
      num_workers,
      len(mine),
      len(train_files),
      ", ".join(os.path.basename(f) for f in mine),
    )
    return streams.examples(mine, kind_object, bad_lines, seed, checker)

  return Task(
    "tsv",
    kind,
    train,
    lambda: strings_dataset(validation_pairs),
    (lambda: strings_dataset(test_pairs)) if test_pairs else None,
    num_classes=num_classes or 2,  # the model config needs a valid count even without classes
    defaults=dict(kind_object.tsv_defaults),
    validation_note=note,
    train_shard=train_shard,
    vocabulary_sample="reservoir",
  )
