"""What the trainer writes into its run directory besides checkpoints (layout: `RunDir`):
the configurations at start, a line per logged step, and the latest evaluation. Every write is
atomic, so a reader (or a crash) never sees half a file."""

import json
from typing import Dict

from tfattn.support.run_dir import RunDir
from train.files import write_json_atomically, write_text_atomically


def write_start(layout: RunDir, config, model_config, task) -> None:
  """run_config.json, model_config.json and task.json, written when a run starts."""
  config.save(layout.run_config)
  write_text_atomically(layout.model_config, model_config.to_json())
  write_json_atomically(
    layout.task,
    {
      "name": task.name,
      "kind": task.kind,
      "num_classes": task.num_classes,
      "truncate": config.data.truncate or "right",
    },
  )


def append_train_log(layout: RunDir, record: Dict) -> None:
  with open(layout.train_log, "a") as f:
    f.write(json.dumps(record) + "\n")


def write_evaluation(layout: RunDir, metrics: Dict) -> None:
  """eval.json: the latest evaluation (see `Trainer.run` for its fields)."""
  write_json_atomically(layout.eval_metrics, metrics)
