"""`--keep_best_by`: the weights with the best validation value of one metric, kept beside the
regular checkpoints (`checkpoints/best/`), so the final evaluation, the test number and the
export can use them instead of the last weights."""

import json
import os
from typing import Dict, Optional

import tensorflow as tf
from absl import logging

from tfattn.kinds import HIGHER, LOWER
from train.files import write_json_atomically

RECORD = "best.json"


class BestCheckpoint:
  """Saves the model whenever `metric` improves on validation.

  Args:
    model: the model whose weights are kept.
    directory: where (created on the first save); a resumed run reads its record there.
    metric: a key of the validation metrics, e.g. "accuracy", "bleu" or "perplexity".
    direction: HIGHER or LOWER, which way the metric improves (the kind's `best_by`).
  """

  def __init__(self, model: tf.Module, directory: str, metric: str, direction: str = HIGHER):
    if direction not in (HIGHER, LOWER):
      raise ValueError(f"direction must be {HIGHER!r} or {LOWER!r}, got {direction!r}")
    self.metric, self.directory, self.direction = metric, directory, direction
    self._checkpoint = tf.train.Checkpoint(model=model)
    self._manager = tf.train.CheckpointManager(
      self._checkpoint, directory, max_to_keep=1, checkpoint_name="best"
    )
    self.record: Optional[Dict] = None
    path = os.path.join(directory, RECORD)
    if os.path.exists(path):
      with open(path) as f:
        self.record = json.load(f)

  def offer(self, metrics: Dict, step: int) -> bool:
    """Saves the current weights if `metrics[metric]` beats the best so far."""
    value = metrics[self.metric]
    if self.record is not None:
      best = self.record["value"]
      if (value <= best) if self.direction == HIGHER else (value >= best):
        return False
    prefix = self._manager.save(checkpoint_number=step)
    self.record = {
      "metric": self.metric,
      "value": value,
      "step": step,
      "checkpoint": os.path.basename(prefix),
    }
    write_json_atomically(os.path.join(self.directory, RECORD), self.record)
    logging.info("best validation %s so far: %.4f at step %d (kept)", self.metric, value, step)
    return True

  @property
  def prefix(self) -> str:
    """The best weights' checkpoint prefix."""
    if self.record is None:
      raise ValueError(f"no best checkpoint by {self.metric} in {self.directory}")
    return os.path.join(self.directory, self.record["checkpoint"])

  def restore(self) -> str:
    """Loads the best weights into the model; returns their checkpoint prefix."""
    prefix = self.prefix
    self._checkpoint.read(prefix).expect_partial().assert_existing_objects_matched()
    return prefix
