"""The sparse label-smoothed loss against the dense definition, computed in float64."""

import numpy as np
import pytest
import tensorflow as tf

from tfattn import losses


def _dense_reference(logits, labels, smoothing, pad_id):
  """Cross-entropy with the smoothed one-hot target, minus that target's entropy (float64)."""
  logits = logits.astype(np.float64)
  vocab = logits.shape[-1]
  log_probs = (
    logits
    - np.log(np.sum(np.exp(logits - logits.max(-1, keepdims=True)), -1, keepdims=True))
    - logits.max(-1, keepdims=True)
  )
  target = np.full(logits.shape, smoothing / (vocab - 1))
  np.put_along_axis(target, np.maximum(labels, 0)[..., None], 1.0 - smoothing, axis=-1)
  entropy = -np.sum(np.where(target > 0, target * np.log(np.where(target > 0, target, 1)), 0), -1)
  loss = -np.sum(target * log_probs, -1) - entropy
  return loss * (labels != pad_id)


@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.3])
@pytest.mark.parametrize("pad_id", [0, -1])
def test_matches_the_dense_definition(smoothing, pad_id):
  rng = np.random.default_rng(0)
  logits = rng.normal(scale=3.0, size=(3, 5, 11)).astype(np.float32)
  labels = rng.integers(1, 11, size=(3, 5)).astype(np.int32)
  labels[0, 3:] = pad_id
  token_losses, weights = losses.label_smoothed_cross_entropy(
    tf.constant(logits), tf.constant(labels), smoothing, pad_id=pad_id
  )
  np.testing.assert_allclose(
    token_losses.numpy(), _dense_reference(logits, labels, smoothing, pad_id), atol=2e-5
  )
  np.testing.assert_array_equal(weights.numpy(), (labels != pad_id).astype(np.float32))


def test_a_perfect_prediction_scores_zero_with_smoothing():
  vocab, smoothing = 7, 0.1
  # The smoothed target itself as a distribution: logits = log(target).
  target = np.full((1, 1, vocab), smoothing / (vocab - 1))
  target[0, 0, 4] = 1 - smoothing
  token_losses, _ = losses.label_smoothed_cross_entropy(
    tf.constant(np.log(target), tf.float32), tf.constant([[4]]), smoothing
  )
  assert abs(float(token_losses[0, 0])) < 1e-5


def test_bfloat16_logits_are_scored_in_float32():
  logits = tf.random.stateless_normal([2, 3, 50], seed=[1, 2])
  labels = tf.constant([[1, 2, 3], [4, 5, 0]])
  full, _ = losses.label_smoothed_cross_entropy(logits, labels, 0.1)
  low, _ = losses.label_smoothed_cross_entropy(tf.cast(logits, tf.bfloat16), labels, 0.1)
  assert low.dtype == tf.float32
  np.testing.assert_allclose(low.numpy(), full.numpy(), atol=0.05)
