"""Tasks: where examples come from. Every task yields raw strings, so one tokenizer path serves
all of them and the exported model takes text.

* Built-in, generated offline and deterministically from a seed: `copy`, `reverse`, `sort`,
  `addition` (digit sequences) and `numbers` (digits -> English words, the default).
* `tensorflow-datasets`: `ted_hrlr_translate/pt_to_en`, `wmt14_translate/de-en`, `imdb_reviews`.
* `tsv`: local `source<TAB>target` (seq2seq) or `text<TAB>label` (classification) files.
"""

import dataclasses
import os
import random
import socket
import threading
from typing import Callable, Dict

import tensorflow as tf
from absl import logging

from tfattn.kinds import CLASSIFICATION, SEQ2SEQ  # noqa: F401 (kind names, one owner)
from train.number_words import number_to_words


@dataclasses.dataclass(frozen=True)
class Task:
  """A data source plus what to measure on it and sensible training defaults."""
  name: str
  kind: str
  train: Callable[[], tf.data.Dataset]   # (source, target) strings | (text, int label)
  eval: Callable[[], tf.data.Dataset]
  num_classes: int = 2
  defaults: Dict = dataclasses.field(default_factory=dict)  # RunConfig values for this task


# Training defaults by kind of task (RunConfig values); a --recipe or explicit flags override.
# The built-in tasks decay the rate to 0 at the last step: under Noam (1.4e-3 at step 4000)
# the last updates still jolt the weights, and the default task's held-out exact match ended
# anywhere from 0.909 to 0.998 with the seed or device (WORKSPACE_NOTES).
BUILTIN_DEFAULTS = dict(model="tiny", d_model=128, dff=512, num_layers=2, vocab_size=1000,
                        max_length=32, batch_size=64, train_steps=4000, warmup_steps=400,
                        dropout=0.0, schedule="cosine", learning_rate=2e-3,
                        vocab_examples=10_000)
TRANSLATION_DEFAULTS = dict(model="base", vocab_size=8000, max_length=128, batch_size=64,
                            train_steps=100_000, warmup_steps=4000, dropout=0.1,
                            learning_rate=1.0, vocab_examples=200_000)
TSV_SEQ2SEQ_DEFAULTS = dict(model="small", vocab_size=4000, max_length=64, batch_size=64,
                            train_steps=5000, warmup_steps=1000, dropout=0.1, learning_rate=1.0,
                            vocab_examples=200_000)
# Classification: case-folded text; reviews give their verdict at the end, so long texts keep
# their last tokens; no label smoothing on a handful of classes; a peak learning rate set
# directly (Noam's peak depends on d_model).
CLASSIFICATION_DEFAULTS = dict(model="small", num_layers=2, d_model=128, dff=512,
                               vocab_size=16000, max_length=256, batch_size=32,
                               train_steps=2400, warmup_steps=200, dropout=0.1,
                               schedule="cosine", learning_rate=5e-4, label_smoothing=0.0,
                               lower_case=True, truncate="left", vocab_examples=50_000)


def _strings_dataset(pairs):
  sources, targets = zip(*pairs)
  return tf.data.Dataset.from_tensor_slices((list(sources), list(targets)))


def _held_out_split(make_example, seed, num_train, num_eval, can_hold_out=lambda source: True):
  """Draws distinct examples; eval examples never appear in train. Only sources passing
  `can_hold_out` may go to eval (a task's tiny cases must all stay trainable)."""
  rng = random.Random(seed)
  seen, eval_pairs, train_pairs = set(), [], []
  attempts = 0
  while len(eval_pairs) < num_eval or len(train_pairs) < num_train:
    attempts += 1
    if attempts > 50 * (num_train + num_eval):
      raise ValueError("task space too small for the requested train/eval sizes")
    pair = make_example(rng)
    if not can_hold_out(pair[0]):
      train_pairs.append(pair)
      continue
    if pair[0] in seen:
      if len(eval_pairs) >= num_eval:
        train_pairs.append(pair)  # repeats are fine in train, never shared with eval
      continue
    seen.add(pair[0])
    (eval_pairs if len(eval_pairs) < num_eval else train_pairs).append(pair)
  eval_sources = {source for source, _ in eval_pairs}
  train_pairs = [p for p in train_pairs if p[0] not in eval_sources]
  return train_pairs, eval_pairs


def _algorithmic(name, transform, min_len=3, max_len=12):
  def make_example(rng):
    digits = [str(rng.randrange(10)) for _ in range(rng.randint(min_len, max_len))]
    return " ".join(digits), " ".join(transform(digits))
  return make_example


def _addition(rng):
  a, b = rng.randrange(10**rng.randint(1, 5)), rng.randrange(10**rng.randint(1, 5))
  def spaced(n):
    return " ".join(str(n))
  return f"{spaced(a)} + {spaced(b)}", spaced(a + b)


def _numbers(max_digits):
  """Digit count uniform in 1..max_digits, so short numbers are as common as long ones."""
  def make_example(rng):
    digits = rng.randint(1, max_digits)
    n = rng.randrange(10**(digits - 1) if digits > 1 else 0, 10**digits)
    return str(n), number_to_words(n)
  return make_example


def builtin_task(name, seed=0, num_train=50_000, num_eval=1_000):
  makers = {
      "copy": _algorithmic("copy", lambda d: d),
      "reverse": _algorithmic("reverse", lambda d: d[::-1]),
      "sort": _algorithmic("sort", sorted),
      "addition": _addition,
      "numbers": _numbers(6),
  }
  # Numbers below 1000 are each a word pattern of their own: all stay in training, and the
  # held-out set measures generalisation to unseen 4-6 digit numbers.
  can_hold_out = (lambda source: len(source) >= 4) if name == "numbers" else (lambda s: True)
  train_pairs, eval_pairs = _held_out_split(makers[name], seed, num_train, num_eval,
                                            can_hold_out)
  return Task(name, SEQ2SEQ, lambda: _strings_dataset(train_pairs),
              lambda: _strings_dataset(eval_pairs),
              defaults=BUILTIN_DEFAULTS)


BUILTIN_TASKS = ("numbers", "copy", "reverse", "sort", "addition")


# Where each TFDS task downloads from. Probed (a few seconds at most) before a download, so an
# offline machine fails at once with instructions instead of retrying for minutes.
TFDS_DOWNLOAD_HOSTS = {
    "ted_hrlr_translate/pt_to_en": ("www.phontron.com", 80),
    "wmt14_translate/de-en": ("www.statmt.org", 80),
    "imdb_reviews": ("ai.stanford.edu", 80),
}


class DataUnavailableError(ValueError):
  """A dataset is neither prepared locally nor downloadable from here."""


def reachable(host, port, timeout=3.0):
  """True if a TCP connection to host:port opens within `timeout` seconds (DNS included)."""
  opened = []

  def connect():
    try:
      socket.create_connection((host, port), timeout=timeout).close()
      opened.append(True)
    except OSError:
      pass

  # getaddrinfo ignores socket timeouts: a daemon thread bounds the whole attempt.
  thread = threading.Thread(target=connect, daemon=True)
  thread.start()
  thread.join(timeout)
  return bool(opened)


def prepared_tfds_builder(name, data_dir=None):
  """The TFDS builder of `name` with its data prepared in `data_dir` (downloading it if needed
  and possible). Raises DataUnavailableError with one actionable line when offline."""
  try:
    import tensorflow_datasets as tfds  # imported lazily: only TFDS tasks need it
  except ImportError as error:
    raise DataUnavailableError(f"tensorflow-datasets cannot be imported ({error}); "
                               "reinstall with `pip install -r requirements.txt`") from None
  builder = tfds.builder(name, data_dir=data_dir)
  if builder.is_prepared():
    return builder
  where = data_dir or f"{tfds.core.constants.DATA_DIR} (the default --data_dir)"
  host, port = TFDS_DOWNLOAD_HOSTS[name]
  if not reachable(host, port):
    raise DataUnavailableError(
        f"{name} is not prepared in {where} and {host} cannot be reached to download it: on a "
        f"connected machine run `tfds build {name} --data_dir=DIR`, copy DIR here and pass "
        f"--data_dir=DIR")
  logging.info("downloading and preparing %s into %s (once)", name, where)
  builder.download_and_prepare()
  return builder


def _tfds_split(builder, split):
  return lambda: builder.as_dataset(split=split, as_supervised=True, shuffle_files=False)


def tfds_task(name, data_dir=None):
  if name not in TFDS_DOWNLOAD_HOSTS:
    raise ValueError(f"unknown TFDS task {name!r}")
  builder = prepared_tfds_builder(name, data_dir)
  if name == "imdb_reviews":
    return Task(name, CLASSIFICATION, _tfds_split(builder, "train"),
                _tfds_split(builder, "test"), defaults=CLASSIFICATION_DEFAULTS)
  return Task(name, SEQ2SEQ, _tfds_split(builder, "train"), _tfds_split(builder, "validation"),
              defaults=TRANSLATION_DEFAULTS)


TFDS_TASKS = tuple(TFDS_DOWNLOAD_HOSTS)


def _read_tsv(path, kind):
  """Validates the whole file up front so bad lines fail with their line number."""
  if not os.path.isfile(path):
    raise ValueError(f"TSV file {path} does not exist (or is not a file)")
  pairs = []
  with open(path, "rb") as f:
    for number, raw in enumerate(f, 1):
      try:
        line = raw.decode("utf-8").rstrip("\n").rstrip("\r")
      except UnicodeDecodeError as error:
        raise ValueError(f"{path}:{number}: not valid UTF-8 ({error.reason} at byte "
                         f"{error.start} of the line); save the file as UTF-8") from None
      if not line.strip():
        continue
      fields = line.split("\t")
      if len(fields) != 2:
        raise ValueError(f"{path}:{number}: expected 2 tab-separated fields, got {len(fields)}")
      if kind == CLASSIFICATION:
        try:
          fields[1] = int(fields[1])
        except ValueError:
          raise ValueError(f"{path}:{number}: label {fields[1]!r} is not an integer") from None
        if fields[1] < 0:
          raise ValueError(f"{path}:{number}: label must be >= 0, got {fields[1]}")
      pairs.append(tuple(fields))
  if not pairs:
    raise ValueError(f"{path}: no examples")
  return pairs


def tsv_task(train_file, eval_file, kind=SEQ2SEQ):
  if kind not in (SEQ2SEQ, CLASSIFICATION):
    raise ValueError(f"tsv kind must be {SEQ2SEQ!r} or {CLASSIFICATION!r}, got {kind!r}")
  train_pairs = _read_tsv(train_file, kind)
  eval_pairs = _read_tsv(eval_file, kind) if eval_file else train_pairs[:1000]
  num_classes = (max(int(y) for _, y in train_pairs + eval_pairs) + 1
                 if kind == CLASSIFICATION else 2)
  defaults = CLASSIFICATION_DEFAULTS if kind == CLASSIFICATION else TSV_SEQ2SEQ_DEFAULTS
  return Task("tsv", kind, lambda: _strings_dataset(train_pairs),
              lambda: _strings_dataset(eval_pairs), num_classes=max(num_classes, 2),
              defaults=defaults)


def get_task(name, seed=0, data_dir=None, train_file=None, eval_file=None,
             tsv_kind=SEQ2SEQ) -> Task:
  if name in BUILTIN_TASKS:
    return builtin_task(name, seed)
  if name in TFDS_TASKS:
    return tfds_task(name, data_dir)
  if name == "tsv":
    if not train_file:
      raise ValueError("--task=tsv needs --train_file")
    return tsv_task(train_file, eval_file, tsv_kind)
  raise ValueError(f"unknown task {name!r}; choose one of "
                   f"{list(BUILTIN_TASKS) + list(TFDS_TASKS) + ['tsv']}")
