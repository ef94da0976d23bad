"""The loop section: how long the run trains, how often it logs, saves and evaluates, and
which weights it ends with (`train/trainer.py`)."""

import dataclasses
from typing import Optional

from tfattn.kinds import MODEL_KINDS
from train.flag_choices import CPU_STEPS_PER_LOOP, GPU_STEPS_PER_LOOP
from train.sections.declare import FOLLOWS_MACHINE, MAY_CHANGE, MUST_MATCH, run_setting


@dataclasses.dataclass(frozen=True)
class Loop:
  """The loop section."""

  train_steps: Optional[int] = run_setting(
    None, "Total optimizer steps.", minimum=0, resume=MAY_CHANGE
  )
  grad_accum_steps: Optional[int] = run_setting(
    None,
    "Micro-batches per optimizer step (gradient accumulation): a large effective batch on one GPU.",
    above=0,
    when_unset=1,
    resume=MUST_MATCH,
  )
  steps_per_loop: Optional[int] = run_setting(
    None,
    "Optimizer steps per host call (Orbit's steps_per_loop, Keras' steps_per_execution): the "
    "host reads the loss and batch shapes once per loop, so the device is not left waiting. "
    "Loops end early at log, checkpoint and evaluation steps; Ctrl-C saves at the end of the "
    "current loop. The weights do not depend on it.",
    above=0,
    unset=f"{GPU_STEPS_PER_LOOP} on a GPU, {CPU_STEPS_PER_LOOP} on a CPU",
    resume=FOLLOWS_MACHINE,
  )
  log_every: int = run_setting(100, "Steps between progress lines.", above=0, resume=MAY_CHANGE)
  checkpoint_every: Optional[int] = run_setting(
    None, "Steps between checkpoints.", above=0, when_unset=500, resume=MAY_CHANGE
  )
  keep_checkpoints: Optional[int] = run_setting(
    None, "Checkpoints to keep.", above=0, when_unset=3, resume=MAY_CHANGE
  )
  average_checkpoints: Optional[int] = run_setting(
    None,
    "The final evaluation and the export use the mean weights of the last N "
    "checkpoints (the paper averages the last 5 for its base models); needs "
    "--keep_checkpoints >= N.",
    above=0,
    when_unset=1,
    resume=MAY_CHANGE,
  )
  keep_best_by: Optional[str] = run_setting(
    None,
    "Also keep the checkpoint with the best validation value of this metric (at each "
    "--eval_every); the final evaluation, the test number and the export then use it "
    "instead of the last weights.",
    choices=tuple(sorted({m for kind in MODEL_KINDS.values() for m in kind.best_by})),
    unset="off",
    resume=MAY_CHANGE,
  )
  early_stopping_patience: Optional[int] = run_setting(
    None,
    "Stop training when --keep_best_by's metric has not improved by --early_stopping_min_delta "
    "for this many validation evaluations in a row (every --eval_every steps); the final "
    "evaluation then judges the best weights.",
    minimum=1,
    unset="off",
    resume=MAY_CHANGE,
  )
  early_stopping_min_delta: Optional[float] = run_setting(
    None,
    "--early_stopping_patience: the least change of the metric that counts as improving.",
    minimum=0,
    when_unset=0.0,
    resume=MAY_CHANGE,
  )
  eval_every: Optional[int] = run_setting(
    None,
    "Steps between validation evaluations; 0 = only at the end.",
    minimum=0,
    when_unset=0,
    resume=MAY_CHANGE,
  )
  eval_examples: int = run_setting(
    1000,
    "Validation examples judged at each evaluation; fewer than the validation data holds is "
    'a partial evaluation, which the log and eval.json mark ("partial": true).',
    above=0,
    resume=MAY_CHANGE,
  )
  attention_images: int = run_setting(
    3,
    "Validation examples whose last-layer attention (seq2seq: cross-attention over the "
    "source; classification: over the input) is drawn to TensorBoard's Images tab at every "
    "evaluation; 0 = none.",
    minimum=0,
    resume=MAY_CHANGE,
  )
  test_examples: Optional[int] = run_setting(
    None,
    "Test examples judged at the end. A recipe's reported number is always the whole "
    "test set; a smaller count is for quick checks.",
    above=0,
    unset="all",
    resume=MAY_CHANGE,
  )

  def check(self, kind: Optional[str]) -> None:
    """The rules among the loop's settings, and with the task's kind (None: not known yet)."""
    average, keep, best = self.average_checkpoints, self.keep_checkpoints, self.keep_best_by
    if average and keep and average > keep:
      raise ValueError(
        f"--average_checkpoints ({average}) needs --keep_checkpoints >= it (got {keep})"
      )
    if self.early_stopping_patience and not best:
      raise ValueError(
        "--early_stopping_patience needs --keep_best_by (the validation metric it watches)"
      )
    if self.early_stopping_patience and self.eval_every == 0:
      raise ValueError("--early_stopping_patience needs --eval_every (when validation runs)")
    if best and average and average > 1:
      raise ValueError(
        "--keep_best_by and --average_checkpoints > 1 each choose the final weights: give one "
        "of them"
      )
    best_by = MODEL_KINDS[kind].best_by if kind is not None else {}
    if kind is not None and best and best not in best_by:
      raise ValueError(
        f"--keep_best_by={best} is not a {kind} metric; choose one of {list(best_by)}"
      )
