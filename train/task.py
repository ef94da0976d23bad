"""What a task is: where its examples come from in each of the three data roles, what kind of
model learns it, and the training defaults that suit it.

Roles: **train** (learned from), **validation** (in-run evaluation, checkpoint and recipe
choice) and **test** (judged once, at the end of the run, on the weights that get exported;
nothing is chosen on it). Every task yields raw strings, so one tokenizer path serves all of
them and the exported model takes text.
"""

import dataclasses
from typing import Callable, Dict, Optional

import tensorflow as tf

from tfattn.kinds import CLASSIFICATION, LANGUAGE_MODEL, SEQ2SEQ  # noqa: F401 (kind names, one owner)
from train.batching import NO_PACKING, Packing

Examples = Callable[[], tf.data.Dataset]  # (source, target) strings | (text, int label)


@dataclasses.dataclass(frozen=True)
class Task:
  """A data source in its three roles, plus what to measure on it and sensible defaults.

  Attributes:
    name: the task's name (`--task`).
    kind: the task kind (`tfattn.kinds`): SEQ2SEQ or CLASSIFICATION.
    train, validation: functions returning the examples of each role.
    test: the test examples, or None when the task has no test role (a TSV task without
      `--test_file`).
    num_classes: classification only.
    defaults: RunConfig values this task recommends (a recipe or explicit flags override).
    validation_note: said at start when the validation examples are not held out.
    train_shard: `(num_workers, index) -> examples` of worker `index` (a share of the files);
      None: each worker keeps every num_workers-th example of `train`.
    vocabulary_sample: how the vocabularies sample the training examples: "first" (the first
      `vocab_examples`) or "reservoir" (a seeded uniform sample of one pass over all of them,
      for streamed files and large sorted corpora).
    packing: how the kind's `dataset` packs examples into rows (`train.batching.Packing`), the
      one path by which the run's choice reaches it (`train.tasks.get_task`): the language
      model's `--task=text` packing, seq2seq's `--pack_examples`; none for most runs.
  """

  name: str
  kind: str
  train: Examples
  validation: Examples
  test: Optional[Examples] = None
  num_classes: int = 2
  defaults: Dict = dataclasses.field(default_factory=dict)
  validation_note: str = ""
  train_shard: Optional[Callable[[int, int], tf.data.Dataset]] = None
  vocabulary_sample: str = "first"
  packing: Packing = NO_PACKING

  def train_for_worker(self, num_workers: int, index: int) -> tf.data.Dataset:
    """The training examples worker `index` of `num_workers` reads."""
    if num_workers == 1:
      return self.train()
    if self.train_shard is not None:
      return self.train_shard(num_workers, index)
    return self.train().shard(num_workers, index)


def strings_dataset(pairs) -> tf.data.Dataset:
  """[(source, target)] -> a dataset of string (or string, int) pairs."""
  sources, targets = zip(*pairs)
  return tf.data.Dataset.from_tensor_slices((list(sources), list(targets)))


# Training defaults by kind of data (RunConfig values); a --recipe or explicit flags override.
# The built-in tasks decay the rate to 0 at the last step: under Noam (1.4e-3 at step 4000)
# the last updates still jolt the weights, and the default task's held-out exact match ended
# anywhere from 0.909 to 0.998 with the seed or device (WORKSPACE_NOTES).
BUILTIN_DEFAULTS = dict(
  model="tiny",
  d_model=128,
  dff=512,
  num_layers=2,
  vocab_size=1000,
  max_length=32,
  batch_size=64,
  train_steps=4000,
  warmup_steps=400,
  dropout=0.0,
  schedule="cosine",
  learning_rate=2e-3,
  vocab_examples=10_000,
)
TRANSLATION_DEFAULTS = dict(
  model="base",
  vocab_size=8000,
  max_length=128,
  batch_size=64,
  train_steps=100_000,
  warmup_steps=4000,
  dropout=0.1,
  learning_rate=1.0,
  vocab_examples=200_000,
)
TSV_SEQ2SEQ_DEFAULTS = dict(
  model="small",
  vocab_size=4000,
  max_length=64,
  batch_size=64,
  train_steps=5000,
  warmup_steps=1000,
  dropout=0.1,
  learning_rate=1.0,
  vocab_examples=200_000,
)
# Classification: case-folded text; reviews give their verdict at the end, so long texts keep
# their last tokens; no label smoothing on a handful of classes; a peak learning rate set
# directly (Noam's peak depends on d_model).
CLASSIFICATION_DEFAULTS = dict(
  model="small",
  num_layers=2,
  d_model=128,
  dff=512,
  vocab_size=16000,
  max_length=256,
  batch_size=32,
  train_steps=2400,
  warmup_steps=200,
  dropout=0.1,
  schedule="cosine",
  learning_rate=5e-4,
  label_smoothing=0.0,
  lower_case=True,
  truncate="left",
  vocab_examples=50_000,
)
# The language model (`--task=text`, tiny_shakespeare): a small GPT-style model on a few MB
# of text; a recipe or explicit flags override. Its export generates greedily (beam search with
# a length penalty is translation's choice; --decode_strategy chooses).
LANGUAGE_MODEL_DEFAULTS = dict(
  decode=dict(strategy="greedy"),
  model="small",
  num_layers=4,
  d_model=256,
  dff=1024,
  vocab_size=2000,
  max_length=128,
  batch_size=32,
  train_steps=5000,
  warmup_steps=500,
  dropout=0.1,
  schedule="cosine",
  learning_rate=1e-3,
  label_smoothing=0.0,
  vocab_examples=50_000,
)
