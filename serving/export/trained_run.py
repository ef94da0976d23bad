"""Reading a training run directory (`tfattn/support/run_dir.py`) without the training program: its
decoding options, the weights its final evaluation judged, and its model, rebuilt and restored."""

import json
import os
from typing import TYPE_CHECKING, Dict, List, NamedTuple, Optional

from serving.export.export_kinds import EXPORT_KINDS
from tfattn import kinds
from tfattn.config import TransformerConfig
from tfattn.decode_options import DecodeOptions
from tfattn.support.run_dir import RunDir

if TYPE_CHECKING:
  import tensorflow as tf


def run_decode_options(run_dir: str) -> DecodeOptions:
  """The DecodeOptions the run evaluated with (`DecodeOptions.of_run` of its run_config.json,
  read as JSON: serving does not import the training program). A directory without that file
  (made by hand) gets `of_run({})`: what a run evaluated with before DecodeOptions existed."""
  path = RunDir(run_dir).run_config
  values = {}
  if os.path.exists(path):
    with open(path) as f:
      values = json.load(f)
  return DecodeOptions.of_run(values)


def final_weights(run_dir: str) -> Optional[list]:
  """The checkpoint prefixes of the weights the run's final evaluation judged (eval.json's
  "weights": the last, the averaged or the best-on-validation checkpoints; runs finished before
  it existed wrote "averaged_checkpoints" when they averaged), or None for a run that has not
  finished (or judged its latest checkpoint before eval.json named it)."""
  layout = RunDir(run_dir)
  if not os.path.exists(layout.eval_metrics):
    return None
  with open(layout.eval_metrics) as f:
    metrics = json.load(f)
  names = (metrics.get("weights") or {}).get("checkpoints") or metrics.get("averaged_checkpoints")
  if not names:
    return None
  return [os.path.join(layout.checkpoints, name) for name in names]


class TrainedRun(NamedTuple):
  """A training run's model, restored.

  Attributes:
    task_info: the run's task.json ({"name", "kind", "num_classes", "truncate"}).
    model: the rebuilt model with the chosen weights.
    tokenizers: {side: in-graph tokenizer}.
    checkpoints: the checkpoint prefixes whose (mean) weights the model holds.
  """

  task_info: Dict
  model: "tf.Module"
  tokenizers: Dict
  checkpoints: List[str]


def check_run_dir(run_dir: str) -> RunDir:
  """The run directory's layout; a ValueError if it is not a training run directory."""
  layout = RunDir(run_dir)
  for required in (layout.task, layout.model_config):
    if not os.path.exists(required):
      raise ValueError(
        f"{run_dir} is not a training run directory (missing {os.path.basename(required)})"
      )
  return layout


def load_trained(
  run_dir: str, checkpoint: Optional[str] = None, average_last: Optional[int] = None
) -> TrainedRun:
  """Rebuilds the model of a run directory and restores the weights its final evaluation
  judged (or the latest checkpoint of an unfinished run), or the given checkpoint, or the
  average of the last `average_last` checkpoints."""
  from tfattn import text
  from tfattn.support.checkpoints import checkpoints_to_average, restore_average

  layout = check_run_dir(run_dir)
  with open(layout.task) as f:
    task_info = json.load(f)
  with open(layout.model_config) as f:
    model_config = TransformerConfig.from_json(f.read())
  kind = kinds.lookup(task_info["kind"], EXPORT_KINDS)
  model = kind.build_model(model_config)
  chosen = None if checkpoint or average_last else final_weights(run_dir)
  if chosen is None:
    chosen = checkpoints_to_average(layout.checkpoints, checkpoint, average_last or 1)
  restore_average(model, chosen)
  tokenizers = {
    side: text.load_tokenizer(text.tokenizer_path(layout.vocab, side))
    for side in kind.vocabulary_sides
  }
  return TrainedRun(task_info, model, tokenizers, chosen)
