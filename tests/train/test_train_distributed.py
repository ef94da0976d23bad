"""Training program end to end in subprocesses: replicas, workers, kill/resume, SIGTERM."""

import json
import signal
import subprocess

import numpy as np
import pytest
import tensorflow as tf

from train_helpers import (
  COLD,
  REPO,
  assert_same_variables,
  environment,
  kill,
  latest_variables,
  logged_steps,
  run_train,
  run_trains,
  run_workers,
  start_train,
  train_command,
  wait_for_step,
)

pytestmark = pytest.mark.slow  # trains, exports or runs programs


def test_two_mirrored_replicas_match_one_replica(tmp_path):
  one, two = tmp_path / "one", tmp_path / "two"
  run_trains(  # cold: compared runs have their own hash seeds, as users' runs have
    (one, "--train_steps=6", "--strategy=one_device", "--deterministic"),
    (two, "--train_steps=6", "--strategy=mirrored", "--cpu_replicas=2", "--deterministic"),
    python=COLD,
  )
  losses_one = [r["loss"] for r in logged_steps(one)]
  losses_two = [r["loss"] for r in logged_steps(two)]
  assert len(losses_one) == len(losses_two) == 6
  np.testing.assert_allclose(losses_two, losses_one, atol=1e-5)


def test_killed_run_resumes_to_the_same_weights(tmp_path):
  total = 48
  # A save costs ~0.7 CPU s at these sizes (the data pipeline's state): every 10 steps, not 5.
  common = [f"--train_steps={total}", "--checkpoint_every=10", "--dropout=0.1", "--deterministic"]
  straight, interrupted = tmp_path / "straight", tmp_path / "interrupted"
  # Cold starts: three processes with their own hash seeds, as users' runs have.
  reference = start_train(straight, *common, python=COLD)  # beside the interrupted run

  process = start_train(interrupted, *common, python=COLD)
  wait_for_step(interrupted, 11, process)
  # SIGKILL: no chance to save; resume from the newest checkpoint (step 10 or a later one). The
  # kill comes 37 steps before the end: a run that got there first fails here, not later.
  assert kill(process) == -signal.SIGKILL, "the run ended before it was killed"
  logged_before = [r["step"] for r in logged_steps(interrupted)]
  checkpoint = int(tf.train.latest_checkpoint(str(interrupted / "checkpoints")).split("-")[-1])
  saved_step = int(
    latest_variables(interrupted)["optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE"]
  )
  assert 10 <= saved_step < total and saved_step % 10 == 0, (checkpoint, saved_step)

  resumed = run_train(interrupted, *common, python=COLD)
  assert f"at step {saved_step}" in resumed.stdout + resumed.stderr
  assert any(
    "resumed from" in line and line.endswith(f"ckpt-{checkpoint} at step {saved_step}")
    for line in (resumed.stdout + resumed.stderr).splitlines()
  ), (resumed.stdout + resumed.stderr)[-3000:]
  # The log is appended: steps up to the checkpoint once, then the steps the kill lost again.
  steps = [r["step"] for r in logged_steps(interrupted)]
  assert logged_before == list(range(1, len(logged_before) + 1))
  assert steps == logged_before + list(range(saved_step + 1, total + 1)), steps
  assert reference.wait(timeout=300) == 0, reference.communicate()[0][-4000:]

  assert_same_variables(latest_variables(straight), latest_variables(interrupted))

  def final(d):
    return [r["loss"] for r in logged_steps(d) if r["step"] > total - 5]

  np.testing.assert_array_equal(final(straight)[-5:], final(interrupted)[-5:])


def test_sigterm_and_ctrl_c_save_a_checkpoint_and_exit_cleanly(tmp_path):
  """SIGTERM after a step; Ctrl-C in a run of 7-step loops: saved at the end of its loop."""
  signals = {"sigterm": signal.SIGTERM, "ctrl_c": signal.SIGINT}
  loops = {"sigterm": ["--steps_per_loop=1"], "ctrl_c": ["--steps_per_loop=7", "--log_every=14"]}
  processes = {
    name: start_train(
      tmp_path / name, "--train_steps=100000", "--checkpoint_every=100000", *loops[name]
    )
    for name in signals
  }
  for name, signum in signals.items():
    wait_for_step(tmp_path / name, 3, processes[name])
    assert kill(processes[name], signum) == 0, name
    saved = latest_variables(tmp_path / name)
    step = int(saved["optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE"])
    assert 3 <= step < 100000, name
    output = processes[name].stdout.read()
    if name == "ctrl_c":
      assert step % 7 == 0, step  # a loop boundary
      assert "saving a checkpoint when the current loop of up to 7 steps ends" in output
    assert f"stopped at step {step}; run again" in output


def test_two_workers_train_with_multi_worker_mirrored_strategy(tmp_path):
  outputs = run_workers(tmp_path, "--train_steps=3")
  assert "with 2 replica(s)" in outputs[0]  # MultiWorkerMirroredStrategy, 2 workers
  assert [r["step"] for r in logged_steps(tmp_path)] == [1, 2, 3]
  assert not (tmp_path / "tmp_workers" / "worker_1").exists() or not any(
    (tmp_path / "tmp_workers" / "worker_1").glob("ckpt-*")
  )
  assert latest_variables(tmp_path)


def test_mixed_precision_training_runs_and_records_the_compute_dtype(tmp_path):
  precisions = ["mixed_float16", "mixed_bfloat16"]
  run_trains(*[(tmp_path / p, "--train_steps=3", f"--mixed_precision={p}") for p in precisions])
  for precision in precisions:
    losses = [r["loss"] for r in logged_steps(tmp_path / precision)]
    assert len(losses) == 3 and all(np.isfinite(losses)), precision
    config = json.loads((tmp_path / precision / "model_config.json").read_text())
    assert config["compute_dtype"] == precision.split("_")[1]


def test_clip_norm_with_float16_is_refused_clearly(tmp_path):
  command = train_command(tmp_path, "--clip_norm=1", "--mixed_precision=mixed_float16")
  result = subprocess.run(
    command, cwd=REPO, env=environment(), capture_output=True, text=True, timeout=300
  )
  assert result.returncode == 2 and "mixed_bfloat16" in result.stderr
