"""`RunConfig`: everything a training run was started with, saved next to its checkpoints."""

import dataclasses
import json
from typing import Optional

from train.files import write_json_atomically


@dataclasses.dataclass
class RunConfig:
  run_dir: str = "runs/default"
  task: str = "numbers"
  data_dir: Optional[str] = None
  train_file: Optional[str] = None
  eval_file: Optional[str] = None
  tsv_kind: str = "seq2seq"
  # Model: a preset, optionally resized. None = the task's default.
  model: Optional[str] = None
  d_model: Optional[int] = None
  num_heads: Optional[int] = None
  dff: Optional[int] = None
  num_layers: Optional[int] = None
  norm_position: str = "post"
  dropout: Optional[float] = None
  vocab_size: Optional[int] = None
  vocab_examples: Optional[int] = None      # examples the vocabulary is learned from
  max_length: Optional[int] = None
  # Optimisation.
  batch_size: Optional[int] = None          # global, across replicas
  train_steps: Optional[int] = None
  learning_rate: Optional[float] = None     # scale on the Noam schedule
  warmup_steps: Optional[int] = None
  label_smoothing: float = 0.1
  clip_norm: float = 0.0                    # 0 = no clipping
  mixed_precision: str = "float32"          # float32 | mixed_float16 | mixed_bfloat16
  seed: int = 0
  deterministic: bool = False
  # Distribution.
  strategy: str = "auto"
  cpu_replicas: int = 0
  # Book-keeping.
  checkpoint_every: int = 500
  keep_checkpoints: int = 3
  log_every: int = 100
  eval_every: int = 0                       # 0 = only at the end
  eval_examples: int = 1000
  export_base_path: Optional[str] = None    # export a new serving version when training ends

  def with_task_defaults(self, defaults):
    """Fills every unset (None) field from the task's recommended values."""
    filled = dataclasses.asdict(self)
    for key, value in defaults.items():
      if filled.get(key) is None:
        filled[key] = value
    return RunConfig(**filled)

  def save(self, path):
    write_json_atomically(path, dataclasses.asdict(self))

  @classmethod
  def load(cls, path):
    with open(path) as f:
      return cls(**json.load(f))
