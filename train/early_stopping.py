"""`--early_stopping_patience`: training stops when a validation metric stops improving.

The metric is `--keep_best_by`'s (so the weights kept are the best ones the final evaluation
then judges), for every kind: its direction is the kind's (`best_by`). The state lives in the
run directory (`early_stopping.json`, written atomically at each evaluation), so a run
resumed after a kill counts on from where it was, and a run that stopped stays stopped.
"""

import json
import os
from typing import Dict, Optional

from tfattn.kinds import HIGHER, LOWER
from train.files import write_json_atomically

FILE = "early_stopping.json"


class EarlyStopping:
  """Counts the evaluations since `metric` last improved by more than `min_delta`.

  Args:
    run_dir: where the state is kept (read back on resume).
    metric: a key of the validation metrics.
    direction: HIGHER or LOWER, which way it improves.
    patience: evaluations without improvement that stop the run.
    min_delta: the least change that counts as improving.
    write: whether this process writes the state (the chief).
  """

  def __init__(
    self,
    run_dir: str,
    metric: str,
    direction: str,
    patience: int,
    min_delta: float = 0.0,
    write: bool = True,
  ):
    if direction not in (HIGHER, LOWER):
      raise ValueError(f"direction must be {HIGHER!r} or {LOWER!r}, got {direction!r}")
    self.metric, self.direction = metric, direction
    self.patience, self.min_delta, self.write = patience, min_delta, write
    self.path = os.path.join(run_dir, FILE)
    self.state: Dict = {"best": None, "best_step": None, "waited": 0, "stopped_at": None}
    if os.path.exists(self.path):
      with open(self.path) as f:
        saved = json.load(f)
      saved.pop("metric", None)  # written for the reader's sake
      self.state.update(saved)

  @property
  def stopped(self) -> bool:
    return self.state["stopped_at"] is not None

  def _improves(self, value: float, best: Optional[float]) -> bool:
    if best is None:
      return True
    gain = value - best if self.direction == HIGHER else best - value
    return gain > self.min_delta

  def update(self, metrics: Dict, step: int) -> bool:
    """Takes one evaluation's metrics; returns True when the run should stop now."""
    value = float(metrics[self.metric])
    if self._improves(value, self.state["best"]):
      self.state.update(best=value, best_step=step, waited=0)
    else:
      self.state["waited"] += 1
      if self.state["waited"] >= self.patience:
        self.state["stopped_at"] = step
    if self.write:
      write_json_atomically(self.path, dict(self.state, metric=self.metric))
    return self.stopped
