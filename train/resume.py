"""Resuming a run directory safely: a run resumes with the configuration it was started with.

Fields that decide what is learned (task, data, model, vocabulary, optimisation) must match the
saved `run_config.json`; fields about how and where it runs (devices, precision, logging,
evaluation, how long) may change. Everything here runs before a file is written.
"""

import dataclasses
import os
from typing import Iterable, Optional

from tfattn.run_dir import RunDir
from train.run_config import RunConfig

# May differ between the first run and a resumed one.
RESUMABLE_CHANGES = frozenset({
    "run_dir", "recipe", "data_dir", "train_steps", "mixed_precision", "jit_compile",
    "deterministic", "strategy", "cpu_replicas", "checkpoint_every", "keep_checkpoints",
    "average_checkpoints", "log_every", "eval_every", "eval_examples", "eval_beam_size",
    "eval_alpha", "export_base_path"})


def saved_config(run_dir: str) -> Optional[RunConfig]:
  """The run's saved configuration, None for a new run. Raises ValueError when the directory
  holds checkpoints or vocabularies but no readable configuration (not ours, or damaged)."""
  layout = RunDir(run_dir)
  path = layout.run_config
  if not os.path.exists(path):
    leftovers = [os.path.basename(p) for p in (layout.checkpoints, layout.vocab,
                                               layout.model_config) if os.path.exists(p)]
    if leftovers:
      raise ValueError(f"{run_dir} holds {', '.join(leftovers)} but no {RunDir.RUN_CONFIG}: it "
                       "was not written by `python -m train`; pass a new --run_dir")
    return None
  try:
    return RunConfig.load(path)
  except (ValueError, TypeError) as error:
    raise ValueError(f"{path} cannot be read ({error}); pass a new --run_dir") from None


# Follow the machine a run resumes on, not the one it started on, unless given as flags.
MACHINE_FIELDS = frozenset({"run_dir", "strategy", "cpu_replicas", "mixed_precision",
                            "jit_compile", "deterministic"})


def merge_for_resume(saved: RunConfig, requested: RunConfig,
                     explicit: Iterable[str]) -> RunConfig:
  """The configuration of a resumed run: the saved values, except the flags given on this
  command line (`explicit`) and the machine-dependent fields (devices, precision, XLA)."""
  explicit = set(explicit) | MACHINE_FIELDS
  return RunConfig(**{field.name: getattr(requested if field.name in explicit else saved,
                                          field.name)
                      for field in dataclasses.fields(RunConfig)})


def differences(saved: RunConfig, resolved: RunConfig) -> list:
  """`name: saved -> now` for every field that decides what is learned and differs."""
  return [f"--{f.name}: {getattr(saved, f.name)!r} -> {getattr(resolved, f.name)!r}"
          for f in dataclasses.fields(RunConfig)
          if f.name not in RESUMABLE_CHANGES
          and getattr(saved, f.name) != getattr(resolved, f.name)]


def check_resumable(run_dir: str, resolved: RunConfig) -> None:
  """Raises ValueError naming every differing field when `run_dir` holds a run started with
  another configuration."""
  saved = saved_config(run_dir)
  changed = differences(saved, resolved) if saved is not None else []
  if changed:
    raise ValueError(f"{run_dir} holds a run started with other settings ({'; '.join(changed)})"
                     ": resume without those flags, or pass a new --run_dir")
