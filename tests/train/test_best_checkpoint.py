"""train/best_checkpoint.py: the best weights by a metric that improves upward or downward."""

import tensorflow as tf

from tfattn.kinds import HIGHER, LOWER
from train.best_checkpoint import BestCheckpoint


def _kept(tmp_path, direction, values):
  weight = tf.Variable(0.0)
  model = tf.Module()
  model.weight = weight
  best = BestCheckpoint(model, str(tmp_path / direction), "metric", direction)
  kept = []
  for step, value in enumerate(values, 1):
    weight.assign(float(step))
    if best.offer({"metric": value}, step):
      kept.append(step)
  weight.assign(-1.0)
  best.restore()
  return kept, float(weight.numpy())


def test_higher_and_lower_is_better_keep_their_own_best(tmp_path):
  values = [3.0, 5.0, 4.0, 2.0]
  assert _kept(tmp_path, HIGHER, values) == ([1, 2], 2.0)  # accuracy: 5.0 at step 2
  assert _kept(tmp_path, LOWER, values) == ([1, 4], 4.0)  # perplexity: 2.0 at step 4
