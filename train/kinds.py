"""Kinds of task for training: everything that differs between translating and classifying (the
model and vocabularies from `tfattn/kinds.py`, plus the batches, the loss, the evaluation and
the FLOPs of a step) as one object per kind, so the trainer never asks which kind it runs, reads
no batch key and names no tokenizer. `TrainingKind` says what a kind provides; a new kind (say a
decoder-only language model) is one class here, one in `tfattn/kinds.py` and one in
`serving/export.py`, each added to its registry.
"""

import sys
from typing import Dict, NamedTuple, Optional, Protocol, Sequence, Tuple, runtime_checkable

import tensorflow as tf

from tfattn import flops, kinds, losses
from tfattn.special_ids import PAD_ID
from train import data, evaluation


class LossSums(NamedTuple):
  """What one batch contributes to a training step, each a float32 scalar.

  Attributes:
    loss: the summed loss over the counted positions.
    correct: counted positions predicted right.
    count: counted positions: target tokens (seq2seq) or examples (classification).
    tokens: tokens the batch holds, for tokens/s (target tokens, or input tokens).
  """
  loss: tf.Tensor
  correct: tf.Tensor
  count: tf.Tensor
  tokens: tf.Tensor


@runtime_checkable
class TrainingKind(kinds.ModelKind, Protocol):
  """What the trainer needs of a task kind, beyond its model and vocabularies."""

  def dataset(self, raw: tf.data.Dataset, tokenizers: Dict, *, training: bool, truncate: str,
              **batching) -> tf.data.Dataset:
    """Raw examples -> batches (dicts of `[batch, ...]` tensors); `batching`: batch_size,
    max_length, shuffle_seed, repeat, drop_remainder, batch_tokens, multiple_of,
    pad_to_bucket (see `train.data`)."""

  def loss_sums(self, model, batch: Dict, smoothing: float) -> LossSums:
    """The batch's loss sums (differentiable)."""

  def batch_shape(self, batch: Dict) -> tf.Tensor:
    """int32 `[3]`: rows, padded source length, padded target length (0 without a target)."""

  def evaluate(self, model, dataset: tf.data.Dataset, tokenizers: Dict, config,
               max_examples: Optional[int]) -> Dict:
    """Metrics on up to `max_examples` examples (None: all), with "examples" judged."""

  def evaluation_note(self, config) -> str:
    """How evaluation judges, for the log (e.g. " (beam 4)")."""

  def forward_flops(self, model_config, rows: int, source_length: int,
                    target_length: int) -> float:
    """Matmul FLOPs of one forward pass over a padded batch."""


def _limit(max_examples: Optional[int]) -> int:
  return sys.maxsize if max_examples is None else max_examples


class Seq2Seq(kinds.Seq2SeqModel):
  """Teacher-forced token loss with label smoothing; decoded as the run's DecodeOptions say;
  sacreBLEU and exact match."""

  def dataset(self, raw, tokenizers, *, training, truncate, **batching):
    """Batches of {"source", "target_in", "target_out"} `[batch, length]` int32 (plus
    "target_text" for evaluation)."""
    del truncate  # sources longer than max_length are cut on the right
    return data.seq2seq_dataset(raw, tokenizers["source"], tokenizers["target"],
                                keep_text=not training, **batching)

  def loss_sums(self, model, batch, smoothing) -> LossSums:
    logits = model(batch["source"], batch["target_in"], training=True)
    token_losses, _ = losses.label_smoothed_cross_entropy(logits, batch["target_out"], smoothing)
    correct, count = losses.masked_accuracy(logits, batch["target_out"])
    return LossSums(tf.reduce_sum(token_losses), correct, count, count)

  def batch_shape(self, batch):
    return tf.stack([tf.shape(batch["source"])[0], tf.shape(batch["source"])[1],
                     tf.shape(batch["target_in"])[1]])

  def evaluate(self, model, dataset, tokenizers, config, max_examples):
    return evaluation.evaluate_seq2seq(model, dataset, tokenizers["target"],
                                       _limit(max_examples), config.decode_options())

  def evaluation_note(self, config) -> str:
    options = config.decode_options()
    return {"greedy": " (greedy)", "beam": f" (beam {options.beam_size})",
            "sample": " (sampling)"}[options.strategy]

  def forward_flops(self, model_config, rows, source_length, target_length) -> float:
    return flops.seq2seq_forward_flops(model_config, rows, source_length, target_length)


class Classification(kinds.ClassifierModel):
  """Cross-entropy over the classes; accuracy."""

  def dataset(self, raw, tokenizers, *, training, truncate, **batching):
    """Batches of {"source": `[batch, length]` int32, "label": `[batch]` int64}."""
    del training  # the same batches train and evaluate
    return data.classification_dataset(raw, tokenizers["source"], truncate=truncate, **batching)

  def loss_sums(self, model, batch, smoothing) -> LossSums:
    """One counted position, the label, per example; the input tokens are what tokens/s
    counts."""
    logits = model(batch["source"], training=True)[:, tf.newaxis]  # [batch, 1, classes]
    labels = tf.cast(batch["label"], tf.int32)[:, tf.newaxis]      # [batch, 1]
    # pad_id=-1 matches no label, so every example counts.
    token_losses, _ = losses.label_smoothed_cross_entropy(logits, labels, smoothing, pad_id=-1)
    correct, count = losses.masked_accuracy(logits, labels, pad_id=-1)
    tokens = tf.reduce_sum(tf.cast(tf.not_equal(batch["source"], PAD_ID), tf.float32))
    return LossSums(tf.reduce_sum(token_losses), correct, count, tokens)

  def batch_shape(self, batch):
    return tf.concat([tf.shape(batch["source"]), [0]], 0)

  def evaluate(self, model, dataset, tokenizers, config, max_examples):
    del tokenizers, config  # labels are compared as ids
    return evaluation.evaluate_classification(model, dataset, _limit(max_examples))

  def evaluation_note(self, config) -> str:
    return ""

  def forward_flops(self, model_config, rows, source_length, target_length) -> float:
    del target_length  # none
    return flops.classifier_forward_flops(model_config, rows, source_length)


TRAINING_KINDS = {kind.name: kind for kind in (Seq2Seq(), Classification())}


def of(task) -> TrainingKind:
  """The kind object of a task (or of a kind name)."""
  return kinds.lookup(task if isinstance(task, str) else task.kind, TRAINING_KINDS)


def step_training_flops(kind: TrainingKind, model_config,
                        shapes: Sequence[Tuple[int, int, int]]) -> float:
  """Training FLOPs of one optimizer step from its micro-batches' padded shapes
  [(rows, source_length, target_length)] (target_length 0 for classification)."""
  return flops.training_flops(sum(kind.forward_flops(model_config, *shape) for shape in shapes))
