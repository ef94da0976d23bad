"""Masked, label-smoothed cross-entropy and accuracy for padded token targets."""

from typing import Tuple

import tensorflow as tf

from tfattn.special_ids import PAD_ID


def label_smoothed_cross_entropy(
  logits: tf.Tensor, labels: tf.Tensor, label_smoothing: float = 0.0, pad_id: int = PAD_ID
) -> Tuple[tf.Tensor, tf.Tensor]:
  """Per-token loss, 0 at padding.

  Args:
    logits: float `[batch, length, vocab]`.
    labels: int `[batch, length]`.
  Returns:
    (float32 `[batch, length]` losses, float32 `[batch, length]` weights: 1 where not padding).
  """
  logits = tf.cast(logits, tf.float32)
  vocab = tf.cast(tf.shape(logits)[-1], tf.float32)
  valid = tf.not_equal(labels, pad_id)
  weights = tf.cast(valid, tf.float32)
  # Padding may use an id outside the vocabulary (-1): point it at id 0, its weight is 0.
  safe_labels = tf.where(valid, labels, tf.zeros_like(labels))
  # Sparse: -log p(label) from the fused op, and sum_v -log p(v) from one logsumexp, instead
  # of a dense one-hot target of [batch, length, vocab].
  nll = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=safe_labels, logits=logits)
  if label_smoothing == 0:
    return nll * weights, weights
  confidence = 1.0 - label_smoothing
  low = label_smoothing / (vocab - 1.0)
  sum_nll = vocab * tf.reduce_logsumexp(logits, axis=-1) - tf.reduce_sum(logits, axis=-1)
  losses = confidence * nll + low * (sum_nll - nll)
  # Subtract the smoothed distribution's own entropy so a perfect model scores 0.
  minimum = -(tf.math.xlogy(confidence, confidence) + (vocab - 1.0) * tf.math.xlogy(low, low))
  losses -= minimum
  return losses * weights, weights


def masked_accuracy(
  logits: tf.Tensor, labels: tf.Tensor, pad_id: int = PAD_ID
) -> Tuple[tf.Tensor, tf.Tensor]:
  """(correct non-pad tokens, non-pad tokens), both float32 scalars, for global averaging."""
  predictions = tf.argmax(logits, axis=-1, output_type=labels.dtype)
  weights = tf.cast(tf.not_equal(labels, pad_id), tf.float32)
  correct = tf.cast(tf.equal(predictions, labels), tf.float32) * weights
  return tf.reduce_sum(correct), tf.reduce_sum(weights)
