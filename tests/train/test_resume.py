"""train.resume: the rules derived from each RunConfig field's declared resume policy."""

import json
import os

import pytest

import settings
from train import resume
from train.run_config import RunConfig
from train.sections.declare import (
  FOLLOWS_MACHINE,
  MAY_CHANGE,
  MUST_MATCH,
  RESUME_POLICIES,
  resume_policy,
  run_setting,
)


def test_every_setting_declares_a_resume_policy():
  for field, _ in settings.leaves(RunConfig):
    assert resume_policy(field) in RESUME_POLICIES, field.name


def test_a_setting_without_a_resume_policy_cannot_be_declared():
  with pytest.raises(TypeError):
    run_setting(1, "no policy")  # pylint: disable=missing-kwoa
  with pytest.raises(ValueError, match="resume policy must be one of"):
    run_setting(1, "a policy nobody knows", resume="sometimes")


def test_the_policies_split_the_settings_as_the_readme_says():
  """What is learned must match; how long and how it is judged may change; devices follow the
  machine."""
  must, may, machine = (resume.fields_with(p) for p in (MUST_MATCH, MAY_CHANGE, FOLLOWS_MACHINE))
  assert {
    "task",
    "builtin_train_examples",
    "d_model",
    "vocab_size",
    "batch_size",
    "seed",
    "schedule",
    "train_file",
    "validation_file",
    "train_split",
  } <= must
  assert {
    "train_steps",
    "eval_every",
    "eval_examples",
    "decode",
    "export_base_path",
    "keep_best_by",
    "test_file",
    "test_split",
  } <= may
  assert {"strategy", "cpu_replicas", "mixed_precision", "jit_compile", "run_dir"} <= machine
  assert {"gpu_replicas", "steps_per_loop"} <= machine  # the weights do not depend on them


def test_resume_takes_the_saved_configuration():
  """`python -m train --run_dir=R` on an existing run resumes it as it was started; flags
  about the machine and the bookkeeping may change."""
  saved = RunConfig.of(
    run_dir="r",
    task="numbers",
    d_model=64,
    train_steps=10,
    seed=3,
    strategy="one_device",
    mixed_precision="float32",
    decode=dict(strategy="beam", beam_size=4, alpha=0.6),
  )
  requested = RunConfig.of(
    run_dir="r", train_steps=20, strategy="mirrored", decode=dict(beam_size=2)
  )
  merged = resume.merge_for_resume(saved, requested, explicit=["run_dir", "train_steps"])
  assert (merged.model.d_model, merged.seed, merged.loop.train_steps) == (64, 3, 20)
  assert merged.device.strategy == "mirrored" and merged.device.mixed_precision == "auto"
  assert merged.decode == dict(strategy="beam", beam_size=2, alpha=0.6)
  assert resume.differences(saved, merged) == []
  assert resume.differences(saved, merged.replace(seed=4)) == ["--seed: 3 -> 4"]
  # Unset is the declared fallback (a run saved before the model's defaults were read).
  post = saved.replace(norm_position="post")
  assert resume.differences(saved.replace(norm_position=None), post) == []
  assert resume.differences(saved.replace(norm_position="pre"), post) == [
    "--norm_position: 'pre' -> 'post'"
  ]


def test_a_directory_with_checkpoints_but_no_config_is_refused(tmp_path):
  os.makedirs(tmp_path / "checkpoints")
  with pytest.raises(ValueError, match="not written by `python -m train`"):
    resume.saved_config(str(tmp_path))
  assert resume.saved_config(str(tmp_path / "new")) is None
  (tmp_path / "run_config.json").write_text(json.dumps({"no_such_field": 1}))
  with pytest.raises(ValueError, match="cannot be read"):
    resume.saved_config(str(tmp_path))
