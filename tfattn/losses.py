"""Masked, label-smoothed cross-entropy and accuracy for padded token targets."""

import tensorflow as tf


def label_smoothed_cross_entropy(logits, labels, label_smoothing=0.0, pad_id=0):
  """Per-token loss, 0 at padding.

  Args:
    logits: float `[batch, length, vocab]`.
    labels: int `[batch, length]`.
  Returns:
    (float32 `[batch, length]` losses, float32 `[batch, length]` weights: 1 where not padding).
  """
  logits = tf.cast(logits, tf.float32)
  vocab = tf.shape(logits)[-1]
  confidence = 1.0 - label_smoothing
  low = label_smoothing / tf.cast(vocab - 1, tf.float32)
  targets = tf.one_hot(labels, vocab, on_value=confidence, off_value=low)
  losses = tf.nn.softmax_cross_entropy_with_logits(targets, logits)
  # Subtract the smoothed distribution's own entropy so a perfect model scores 0.
  if label_smoothing > 0:
    minimum = -(tf.math.xlogy(confidence, confidence) +
                tf.cast(vocab - 1, tf.float32) * tf.math.xlogy(low, low))
    losses -= minimum
  weights = tf.cast(tf.not_equal(labels, pad_id), tf.float32)
  return losses * weights, weights


def masked_accuracy(logits, labels, pad_id=0):
  """(correct non-pad tokens, non-pad tokens), both float32 scalars, for global averaging."""
  predictions = tf.argmax(logits, axis=-1, output_type=labels.dtype)
  weights = tf.cast(tf.not_equal(labels, pad_id), tf.float32)
  correct = tf.cast(tf.equal(predictions, labels), tf.float32) * weights
  return tf.reduce_sum(correct), tf.reduce_sum(weights)
