"""Checkpoint averaging (Vaswani et al., 2017, section 6.1: the base models average the last 5
checkpoints), shared by the trainer's final evaluation and the export, so both judge and serve
the same weights."""

import os
from typing import List, Optional, Sequence

import tensorflow as tf


def checkpoints_to_average(
  checkpoint_dir: str, checkpoint: Optional[str] = None, average_last: int = 1
) -> List[str]:
  """The checkpoint prefixes to average: the given (or latest) one and the kept ones before it,
  `average_last` in all, oldest first."""
  if average_last < 1:
    raise ValueError(f"--average_last must be >= 1, got {average_last}")
  state = tf.train.get_checkpoint_state(checkpoint_dir)
  available = list(state.all_model_checkpoint_paths) if state else []
  if not available and not checkpoint:
    raise ValueError(f"no checkpoint under {checkpoint_dir}: train first")
  if checkpoint and not tf.io.gfile.exists(checkpoint + ".index"):
    kept = ", ".join(available) if available else "none"
    raise ValueError(f"checkpoint {checkpoint} does not exist (kept checkpoints: {kept})")
  if average_last == 1:
    return [checkpoint or available[-1]]
  if checkpoint and checkpoint not in available:
    raise ValueError(f"{checkpoint} is not among the run's kept checkpoints; cannot average")
  last = available.index(checkpoint) if checkpoint else len(available) - 1
  chosen = available[max(0, last + 1 - average_last) : last + 1]
  if len(chosen) < average_last:
    raise ValueError(
      f"--average_last={average_last} but only {len(chosen)} checkpoints are "
      f"kept up to {os.path.basename(chosen[-1])}"
    )
  return chosen


def restore_average(model: tf.Module, checkpoints: Sequence[str]) -> None:
  """Sets `model`'s trainable weights to their mean over `checkpoints` (summed in float64);
  other state (the dropout RNG) comes from the last one."""
  reader = tf.train.Checkpoint(model=model)
  total = None
  for path in checkpoints:
    reader.read(path).expect_partial().assert_existing_objects_matched()
    values = [v.numpy().astype("float64") for v in model.trainable_variables]
    total = values if total is None else [t + v for t, v in zip(total, values)]
  for variable, summed in zip(model.trainable_variables, total):
    variable.assign((summed / len(checkpoints)).astype(variable.dtype.as_numpy_dtype))
