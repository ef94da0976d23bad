"""Kinds of task for training: everything that differs between translating and classifying
(the model and vocabularies from `tfattn/kinds.py`, plus the batches, the loss, the evaluation
and the FLOPs of a step) as one object per kind, so the trainer never asks which kind it runs.
A new kind (say a decoder-only language model) is one class in each of the two files.

A task names its kind (`Task.kind`, also written to `task.json`); `of(task)` is its object.
"""

from typing import Dict, Sequence, Tuple

import tensorflow as tf

from tfattn import flops, kinds, losses
from tfattn.special_ids import PAD_ID
from train import data, evaluation


class Seq2Seq(kinds.Seq2SeqModel):
  """Teacher-forced token loss with label smoothing; greedy or beam decoding, BLEU."""

  def dataset(self, raw: tf.data.Dataset, tokenizers: Dict, training: bool, truncate: str,
              **batching) -> tf.data.Dataset:
    """Batches of {"source", "target_in", "target_out"} `[batch, length]` int32 (plus
    "target_text" for evaluation)."""
    del truncate  # sources longer than max_length are cut on the right
    return data.seq2seq_dataset(raw, tokenizers["source"], tokenizers["target"],
                                keep_text=not training, **batching)

  def loss_sums(self, model, batch: Dict, smoothing: float) -> Tuple[tf.Tensor, ...]:
    """(summed token loss, correct tokens, counted tokens, target tokens): float32 scalars."""
    logits = model(batch["source"], batch["target_in"], training=True)
    token_losses, _ = losses.label_smoothed_cross_entropy(logits, batch["target_out"], smoothing)
    correct, count = losses.masked_accuracy(logits, batch["target_out"])
    return tf.reduce_sum(token_losses), correct, count, count

  def evaluate(self, model, dataset, tokenizers: Dict, config) -> Dict:
    return evaluation.evaluate_seq2seq(model, dataset, tokenizers["target"],
                                       config.eval_examples, config.decode_options())

  def evaluation_note(self, config) -> str:
    return f" (beam {config.eval_beam_size})"

  def forward_flops(self, model_config, rows: int, source_length: int,
                    target_length: int) -> float:
    return flops.seq2seq_forward_flops(model_config, rows, source_length, target_length)


class Classification(kinds.ClassifierModel):
  """Cross-entropy over the classes; accuracy."""

  def dataset(self, raw: tf.data.Dataset, tokenizers: Dict, training: bool, truncate: str,
              **batching) -> tf.data.Dataset:
    """Batches of {"source": `[batch, length]` int32, "label": `[batch]` int64}."""
    del training  # the same batches train and evaluate
    return data.classification_dataset(raw, tokenizers["source"], truncate=truncate, **batching)

  def loss_sums(self, model, batch: Dict, smoothing: float) -> Tuple[tf.Tensor, ...]:
    """(summed loss, correct, counted examples, input tokens): one "token", the label, per
    example; the input tokens are what tokens/s counts."""
    logits = model(batch["source"], training=True)[:, tf.newaxis]  # [batch, 1, classes]
    labels = tf.cast(batch["label"], tf.int32)[:, tf.newaxis]      # [batch, 1]
    # pad_id=-1 matches no label, so every example counts.
    token_losses, _ = losses.label_smoothed_cross_entropy(logits, labels, smoothing, pad_id=-1)
    correct, count = losses.masked_accuracy(logits, labels, pad_id=-1)
    tokens = tf.reduce_sum(tf.cast(tf.not_equal(batch["source"], PAD_ID), tf.float32))
    return tf.reduce_sum(token_losses), correct, count, tokens

  def evaluate(self, model, dataset, tokenizers: Dict, config) -> Dict:
    del tokenizers  # labels are compared as ids
    return evaluation.evaluate_classification(model, dataset, config.eval_examples)

  def evaluation_note(self, config) -> str:
    return ""

  def forward_flops(self, model_config, rows: int, source_length: int,
                    target_length: int) -> float:
    del target_length  # none
    return flops.classifier_forward_flops(model_config, rows, source_length)


KINDS = {kind.name: kind for kind in (Seq2Seq(), Classification())}


def of(task) -> "Seq2Seq | Classification":
  """The kind object of a task (or of a kind name)."""
  return kinds.lookup(task if isinstance(task, str) else task.kind, KINDS)


def step_training_flops(kind, model_config, shapes: Sequence[Tuple[int, int, int]]) -> float:
  """Training FLOPs of one optimizer step from its micro-batches' padded shapes
  [(rows, source_length, target_length)] (target_length 0 for classification)."""
  return flops.training_flops(sum(kind.forward_flops(model_config, *shape) for shape in shapes))
