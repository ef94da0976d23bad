"""`RunConfig`: everything a training run was started with, saved next to its checkpoints."""

import dataclasses
import json
from typing import Optional

from tfattn.decode_options import BEAM, GREEDY, DecodeOptions
from tfattn.kinds import SEQ2SEQ
from train.files import write_json_atomically


@dataclasses.dataclass
class RunConfig:
  run_dir: str = "runs/default"
  task: str = "numbers"
  data_dir: Optional[str] = None
  train_file: Optional[str] = None
  eval_file: Optional[str] = None
  tsv_kind: str = SEQ2SEQ
  recipe: Optional[str] = None              # a named recipe (train/recipes.py) under the flags
  # Model: a preset, optionally resized. None = the task's default.
  model: Optional[str] = None
  d_model: Optional[int] = None
  num_heads: Optional[int] = None
  dff: Optional[int] = None
  num_layers: Optional[int] = None
  norm_position: str = "post"
  classifier_body: Optional[str] = None     # classification: transformer | attention
  dropout: Optional[float] = None           # the paper's residual + embedding dropout
  feed_forward_dropout: Optional[float] = None  # on the feed-forward hidden layer (not the paper's)
  # Text. None = the task's default (then the fallbacks below).
  tokenizer: Optional[str] = None           # sentencepiece (lossless) | wordpiece
  lower_case: Optional[bool] = None         # case-fold before tokenizing (SentencePiece)
  vocab_size: Optional[int] = None
  vocab_examples: Optional[int] = None      # examples the vocabulary is learned from
  max_length: Optional[int] = None
  truncate: Optional[str] = None            # classification: drop tokens on the right | left
  # Optimisation.
  batch_size: Optional[int] = None          # global, across replicas
  batch_tokens: Optional[int] = None        # token-based batches: padded tokens per step
  grad_accum_steps: int = 1                 # micro-batches per optimizer step
  train_steps: Optional[int] = None
  schedule: Optional[str] = None            # noam | rsqrt | cosine
  learning_rate: Optional[float] = None     # noam: scale on the schedule; rsqrt/cosine: peak
  warmup_steps: Optional[int] = None
  label_smoothing: Optional[float] = None
  clip_norm: float = 0.0                    # 0 = no clipping
  mixed_precision: str = "auto"             # auto | float32 | mixed_float16 | mixed_bfloat16
  jit_compile: Optional[bool] = None        # XLA train step; None = on when a GPU is present
  seed: int = 0
  deterministic: bool = False
  # Distribution.
  strategy: str = "auto"
  cpu_replicas: int = 0
  # Book-keeping.
  checkpoint_every: Optional[int] = None
  keep_checkpoints: Optional[int] = None
  average_checkpoints: Optional[int] = None  # the export averages the last N checkpoints
  log_every: int = 100
  eval_every: int = 0                       # 0 = only at the end
  eval_examples: int = 1000
  eval_beam_size: Optional[int] = None      # seq2seq evaluation: 1 = greedy, > 1 = beam search
  eval_alpha: float = 0.6                   # beam search length penalty in evaluation
  export_base_path: Optional[str] = None    # export a new serving version when training ends

  def with_defaults(self, defaults):
    """Fills every unset (None) field from `defaults` (a recipe's or a task's values)."""
    filled = dataclasses.asdict(self)
    unknown = sorted(set(defaults) - set(filled))
    if unknown:
      raise ValueError(f"unknown RunConfig fields {unknown}")
    for key, value in defaults.items():
      if filled.get(key) is None:
        filled[key] = value
    return RunConfig(**filled)

  def resolved(self, *defaults):
    """Fills unset fields from each of `defaults` in turn, then from the global fallbacks."""
    config = self
    for values in defaults + (FALLBACKS,):
      config = config.with_defaults(values)
    return config

  def decode_options(self) -> DecodeOptions:
    """How this run's seq2seq outputs are decoded, in evaluation and in its export."""
    strategy = GREEDY if (self.eval_beam_size or 1) == 1 else BEAM
    return DecodeOptions(strategy=strategy, beam_size=self.eval_beam_size or 1,
                         alpha=self.eval_alpha)

  def save(self, path):
    write_json_atomically(path, dataclasses.asdict(self))

  @classmethod
  def load(cls, path):
    with open(path) as f:
      values = json.load(f)
    # Runs saved before the field existed dropped the feed-forward hidden layer at `dropout`.
    values.setdefault("feed_forward_dropout", values.get("dropout"))
    return cls(**values)


# What an unset field means when neither the recipe nor the task sets it.
FALLBACKS = dict(feed_forward_dropout=0.0, tokenizer="sentencepiece", lower_case=False,
                 truncate="right", schedule="noam",
                 label_smoothing=0.1, eval_beam_size=1, checkpoint_every=500,
                 keep_checkpoints=3, average_checkpoints=1)
