"""`--init_from`: a run that starts from another run's weights (fine-tuning), and `--freeze`.

The other run (a training run directory, or an import: `train.import_marian`) gives this run
its model configuration (this run's dropout and precision apply), its vocabulary files (copied
into this run's vocab/ before anything reads them, so the export carries the same tokenizers)
and its final weights: those its final evaluation judged (eval.json), else its latest
checkpoint. They are read into the model once, when this run starts; a resumed run reads its
own checkpoints (`resume.restore_latest`), so resuming is as exact as without --init_from.
"""

import json
import os
import shutil
from typing import List, Optional

import tensorflow as tf

from tfattn.config import TransformerConfig
from tfattn.support import checkpoints
from tfattn.support.run_dir import RunDir


def check_source(run_dir: str, kind: str) -> RunDir:
  """The other run's layout; a ValueError naming what is missing or does not fit."""
  layout = RunDir(run_dir)
  for path in (layout.model_config, layout.task, layout.vocab):
    if not os.path.exists(path):
      raise ValueError(
        f"--init_from {run_dir}: no {os.path.basename(path)} (give a training run directory "
        "or one train.import_marian wrote)"
      )
  with open(layout.task) as f:
    other = json.load(f).get("kind")
  if other != kind:
    raise ValueError(f"--init_from {run_dir} is a {other} run; this run is {kind}")
  if not tf.train.latest_checkpoint(layout.checkpoints):
    raise ValueError(f"--init_from {run_dir}: no checkpoint in {layout.checkpoints}")
  return layout


def copy_vocabularies(source: RunDir, layout: RunDir) -> None:
  """The other run's vocab/ becomes this run's (once: a resumed run keeps its own copy)."""
  if os.path.exists(layout.vocab):
    return
  staging = layout.vocab + ".tmp"
  shutil.rmtree(staging, ignore_errors=True)
  shutil.copytree(source.vocab, staging)
  os.replace(staging, layout.vocab)


def model_config(source: RunDir, dropout: Optional[float], compute_dtype: str) -> TransformerConfig:
  """The other run's model, with this run's dropout and compute precision."""
  with open(source.model_config) as f:
    config = TransformerConfig.from_json(f.read())
  changes = {"compute_dtype": compute_dtype}
  if dropout is not None:
    changes["dropout_rate"] = dropout
  return config.replace(**changes)


def final_weights(source: RunDir) -> List[str]:
  """The checkpoint prefixes of the weights the other run ended with: those its eval.json
  names (the last, the averaged or the best), else its latest checkpoint."""
  if os.path.exists(source.eval_metrics):
    with open(source.eval_metrics) as f:
      names = (json.load(f).get("weights") or {}).get("checkpoints")
    if names:
      return [os.path.join(source.checkpoints, name) for name in names]
  return [tf.train.latest_checkpoint(source.checkpoints)]


def load_weights(model, source: RunDir) -> List[str]:
  """Reads the other run's final weights (their mean when it averaged) into `model`."""
  chosen = final_weights(source)
  checkpoints.restore_average(model, chosen)
  return chosen


def trained_variables(model, freeze: str) -> list:
  """The variables the optimizer updates: all trainable ones but those `freeze` names
  ("none", "embeddings" or "encoder")."""
  if freeze in (None, "none"):
    return list(model.trainable_variables)
  if freeze == "embeddings":
    frozen = [
      module.table
      for module in model.submodules
      if type(module).__name__ == "Embedding"  # the token tables (tied output included)
    ]
  elif freeze == "encoder":
    encoder = getattr(model, "encoder", None)
    if encoder is None:
      raise ValueError(f"--freeze=encoder: a {type(model).__name__} has no encoder")
    frozen = list(encoder.trainable_variables)
  else:
    raise ValueError(f"--freeze must be none, embeddings or encoder, got {freeze!r}")
  frozen_refs = {v.ref() for v in frozen}
  return [v for v in model.trainable_variables if v.ref() not in frozen_refs]
