"""TensorFlow Datasets as tasks. Each dataset is one entry of `DATASETS`: its kind, the features
that hold the source (or text) and the target (or label), the split slice of each data role, the
number of classes, the training defaults and where it downloads from. A new dataset is one entry.

A dataset that is not prepared in `--data_dir` is downloaded once, if its host can be reached;
offline, the task fails at once with one line saying how to prepare it elsewhere.
"""

import dataclasses
import socket
import threading
from typing import Mapping, Optional, Tuple

import tensorflow as tf
from absl import logging

from tfattn.kinds import LANGUAGE_MODEL
from train.flag_choices import TFDS_TASKS  # the names of DATASETS, in order
from train.task import (
  CLASSIFICATION,
  CLASSIFICATION_DEFAULTS,
  LANGUAGE_MODEL_DEFAULTS,
  SEQ2SEQ,
  TRANSLATION_DEFAULTS,
  Task,
)


@dataclasses.dataclass(frozen=True)
class TfdsDataset:
  """How one TFDS dataset becomes a task.

  Attributes:
    name: the TFDS name (and `--task`), e.g. "wmt14_translate/de-en".
    kind: SEQ2SEQ or CLASSIFICATION.
    features: (source or text feature, target or label feature).
    train_split, validation_split, test_split: the default split slice of each role (TFDS
      slicing syntax, e.g. "train[:90%]"); `--train_split` etc. override them.
    download_host: (host, port) probed before a download, so an offline machine fails fast.
    num_classes: classification only.
    defaults: RunConfig values this dataset recommends.
    evaluated_before_roles: the split a run saved before the three data roles existed
      evaluated on (it resumes with its own train split and that one as validation).
    separator: for a split that is one long text (tiny_shakespeare): each piece between
      separators is one example (blank ones dropped); None: an example is a TFDS example.
    builder: the TFDS builder it reads, when the task's name differs (the other direction
      of a translation pair); default: `name`.
    vocabulary_sample: "first" or "reservoir" (see `train.task.Task`): large corpora stored
      in order (WMT: one sub-corpus after another) are sampled over the whole split.
  """

  name: str
  kind: str
  features: Tuple[str, str]
  train_split: str
  validation_split: str
  test_split: str
  download_host: Tuple[str, int]
  num_classes: int = 2
  defaults: Mapping = dataclasses.field(default_factory=dict)
  evaluated_before_roles: str = "validation"
  separator: Optional[str] = None
  builder: str = ""
  vocabulary_sample: str = "first"

  @property
  def builder_name(self) -> str:
    return self.builder or self.name


DATASETS = {
  dataset.name: dataset
  for dataset in (
    # IMDB ships no validation split: the last 10% of train is held out for it.
    TfdsDataset(
      "imdb_reviews",
      CLASSIFICATION,
      ("text", "label"),
      "train[:90%]",
      "train[90%:]",
      "test",
      ("ai.stanford.edu", 80),
      num_classes=2,
      defaults=CLASSIFICATION_DEFAULTS,
      evaluated_before_roles="test",
    ),
    TfdsDataset(
      "ted_hrlr_translate/pt_to_en",
      SEQ2SEQ,
      ("pt", "en"),
      "train",
      "validation",
      "test",
      ("www.phontron.com", 80),
      defaults=TRANSLATION_DEFAULTS,
    ),
    # validation: newstest2013; test: newstest2014, the paper's test set.
    TfdsDataset(
      "wmt14_translate/de-en",
      SEQ2SEQ,
      ("de", "en"),
      "train",
      "validation",
      "test",
      ("www.statmt.org", 80),
      defaults=TRANSLATION_DEFAULTS,
    ),
    # One text a split (90/5/5% of the plays); a speech (the text between blank lines) an example.
    TfdsDataset(
      "tiny_shakespeare",
      LANGUAGE_MODEL,
      ("text", "text"),
      "train",
      "validation",
      "test",
      ("raw.githubusercontent.com", 443),
      defaults=LANGUAGE_MODEL_DEFAULTS,
      separator="\n\n",
    ),
    # The paper's direction, English->German, read from the same TFDS data (recipe wmt14_base).
    TfdsDataset(
      "wmt14_translate/en-de",
      SEQ2SEQ,
      ("en", "de"),
      "train",
      "validation",
      "test",
      ("www.statmt.org", 80),
      defaults=TRANSLATION_DEFAULTS,
      builder="wmt14_translate/de-en",
      vocabulary_sample="reservoir",
    ),
  )
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


def prepared_builder(dataset: TfdsDataset, data_dir=None):
  """The TFDS builder of `dataset` with its data prepared in `data_dir` (downloading it if
  needed and possible). Raises DataUnavailableError with one actionable line when offline."""
  try:
    import tensorflow_datasets as tfds  # imported lazily: only TFDS tasks need it
  except ImportError as error:
    raise DataUnavailableError(
      f"tensorflow-datasets cannot be imported ({error}); "
      "reinstall with `pip install -r requirements.txt`"
    ) from None
  builder = tfds.builder(dataset.builder_name, data_dir=data_dir)
  if builder.is_prepared():
    return builder
  where = data_dir or f"{tfds.core.constants.DATA_DIR} (the default --data_dir)"
  host, port = dataset.download_host
  if not reachable(host, port):
    raise DataUnavailableError(
      f"{dataset.builder_name} is not prepared in {where} and {host} cannot be reached to "
      f"download it: on a connected machine run `tfds build {dataset.builder_name} "
      "--data_dir=DIR`, copy DIR here "
      f"and pass --data_dir=DIR"
    )
  logging.info("downloading and preparing %s into %s (once)", dataset.builder_name, where)
  builder.download_and_prepare()
  return builder


def _split(builder, dataset: TfdsDataset, split: str):
  """The examples of one split slice as (source, target) or (text, label) pairs."""
  source, target = dataset.features
  try:
    builder.info.splits[split]  # fails on an unknown split or a bad slice, before training
  except (KeyError, ValueError) as error:
    raise ValueError(
      f"{dataset.name} has no split {split!r} ({error}); its splits: {sorted(builder.info.splits)}"
    ) from None

  def examples():
    pairs = builder.as_dataset(split=split, shuffle_files=False).map(
      lambda example: (example[source], example[target])
    )
    if dataset.separator is None:
      return pairs
    pieces = pairs.flat_map(
      lambda text, _: tf.data.Dataset.from_tensor_slices(tf.strings.split(text, dataset.separator))
    )
    return pieces.filter(lambda piece: tf.strings.length(tf.strings.strip(piece)) > 0).map(
      lambda piece: (piece, piece)
    )

  return examples


def tfds_task(
  name: str,
  data_dir: Optional[str] = None,
  train_split: Optional[str] = None,
  validation_split: Optional[str] = None,
  test_split: Optional[str] = None,
) -> Task:
  """The TFDS dataset `name` as a task; a split left None takes the dataset's default, "" means
  no test role."""
  if name not in DATASETS:
    raise ValueError(f"unknown TFDS task {name!r}; choose one of {list(TFDS_TASKS)}")
  dataset = DATASETS[name]
  builder = prepared_builder(dataset, data_dir)
  splits = [
    dataset.train_split if train_split is None else train_split,
    dataset.validation_split if validation_split is None else validation_split,
    dataset.test_split if test_split is None else test_split,
  ]
  train, validation, test = (_split(builder, dataset, split) if split else None for split in splits)
  if train is None or validation is None:
    raise ValueError(f"{name}: --train_split and --validation_split cannot be empty")
  return Task(
    name,
    dataset.kind,
    train,
    validation,
    test,
    num_classes=dataset.num_classes,
    defaults=dict(dataset.defaults),
    vocabulary_sample=dataset.vocabulary_sample,
  )


def splits_before_roles(name: str) -> dict:
  """The split flags that reproduce what a run saved before the data roles trained and
  evaluated on."""
  return dict(
    train_split="train", test_split="", validation_split=DATASETS[name].evaluated_before_roles
  )
