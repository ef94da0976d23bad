"""Resuming a run directory safely: a run resumes with the configuration it was started with.

Every RunConfig setting declares its resume policy (`train/sections/`): settings that decide
what is learned must match the saved `run_config.json`; fields about how long, how often and how
it is judged may change; devices and precision follow the machine the run resumes on. Everything
here runs before a file is written.
"""

import os
from typing import Iterable, Optional

import settings
from tfattn.support.run_dir import RunDir
from train.run_config import FOLLOWS_MACHINE, MUST_MATCH, UNSET_DEFAULTS, RunConfig


def fields_with(policy: str) -> frozenset:
  """The flat names of the settings (every section's) with resume policy `policy`."""
  return frozenset(
    settings.flag_name(f)
    for f, spec in settings.leaves(RunConfig)
    if spec.extra["resume"] == policy
  )


def saved_config(run_dir: str) -> Optional[RunConfig]:
  """The run's saved configuration, None for a new run. Raises ValueError when the directory
  holds checkpoints or vocabularies but no readable configuration (not ours, or damaged)."""
  layout = RunDir(run_dir)
  path = layout.run_config
  if not os.path.exists(path):
    leftovers = [
      os.path.basename(p)
      for p in (layout.checkpoints, layout.vocab, layout.model_config)
      if os.path.exists(p)
    ]
    if leftovers:
      raise ValueError(
        f"{run_dir} holds {', '.join(leftovers)} but no {RunDir.RUN_CONFIG}: it "
        "was not written by `python -m train`; pass a new --run_dir"
      )
    return None
  try:
    return RunConfig.load(path)
  except (ValueError, TypeError) as error:
    raise ValueError(f"{path} cannot be read ({error}); pass a new --run_dir") from None


def merge_for_resume(saved: RunConfig, requested: RunConfig, explicit: Iterable[str]) -> RunConfig:
  """The configuration of a resumed run: the saved values, except the flags given on this
  command line (`explicit` flat names) and the settings that follow the machine. Decoding
  options given on the command line replace the saved ones one by one."""
  explicit = set(explicit) | fields_with(FOLLOWS_MACHINE)
  saved_values, requested_values = saved.flat(), requested.flat()
  merged = {**saved_values, **{k: v for k, v in requested_values.items() if k in explicit}}
  merged["decode"] = {**(saved.decode or {}), **(requested.decode or {})}
  return RunConfig.of(**merged)


def differences(saved: RunConfig, resolved: RunConfig, kind: Optional[str] = None) -> list:
  """`--name: saved -> now` for every setting that decides what is learned and differs. With
  the run's `kind`, the saved run is read as this version reads it (`RunConfig.for_kind`);
  unset is the declared `when_unset` on either side."""
  if kind is not None:
    saved = saved.for_kind(kind)
  before, now = saved.flat(), resolved.flat()
  changed = []
  for name in sorted(fields_with(MUST_MATCH)):
    old, new = (
      UNSET_DEFAULTS.get(name) if v is None else v for v in (before.get(name), now.get(name))
    )
    if old != new:
      changed.append(f"--{name}: {before.get(name)!r} -> {now.get(name)!r}")
  return changed


def check_resumable(run_dir: str, resolved: RunConfig, kind: Optional[str] = None) -> None:
  """Raises ValueError naming every differing setting when `run_dir` holds a run started with
  another configuration (of a task of `kind`)."""
  saved = saved_config(run_dir)
  changed = differences(saved, resolved, kind) if saved is not None else []
  if changed:
    raise ValueError(
      f"{run_dir} holds a run started with other settings ({'; '.join(changed)})"
      ": resume without those flags, or pass a new --run_dir"
    )


def restore_latest(manager, restart_data, **without_data) -> Optional[str]:
  """`manager.restore_or_initialize()`, whose checkpoint holds the input position (`data`).
  A run saved by another input pipeline (before training files streamed, or with the other
  --bad_lines) cannot restore that position: `restart_data()` gives the checkpoint a fresh
  input iterator, the other objects (`without_data`: model, optimizer) are restored, and a
  warning says the data starts a new pass. Returns the restored path, or None for a new run."""
  import tensorflow as tf
  from absl import logging

  try:
    return manager.restore_or_initialize()
  except tf.errors.OpError as error:
    if "restore dataset iterator" not in str(error):
      raise
  path = manager.latest_checkpoint
  restart_data()
  tf.train.Checkpoint(**without_data).read(path).expect_partial()
  logging.warning(
    "%s holds the position of another input pipeline (a run saved before training files "
    "streamed, or --bad_lines changed): the weights and optimizer resume, the data starts a "
    "new pass (not an exact resume)",
    path,
  )
  return path
