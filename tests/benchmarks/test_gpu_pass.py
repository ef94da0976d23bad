"""benchmarks/gpu_pass.py --quick on the CPU: every step runs at the tiniest sizes in its own
process, the steps that need a GPU say so, and both reports are written."""

import json
import os
import subprocess

import pytest

import warm_start
from train_helpers import REPO, environment

pytestmark = pytest.mark.slow  # trains the default task twice in subprocesses


def test_quick_pass_on_the_cpu_writes_both_reports(tmp_path):
  result = subprocess.run(
    [
      *warm_start.python(),
      os.path.join("benchmarks", "gpu_pass.py"),
      "--quick",
      f"--out_dir={tmp_path}",
      # The fast suite is the suite's job; decode and engines have their own tests.
      "--skip=suite,decode,engines",
    ],
    cwd=REPO,
    env=environment(),
    capture_output=True,
    text=True,
    timeout=400,
  )
  assert result.returncode == 0, result.stderr[-3000:]
  report = json.loads((tmp_path / "gpu_pass.json").read_text())
  steps = report["steps"]
  assert sorted(steps) == sorted(
    ["device", "engines", "throughput", "train", "decode", "replicas", "suite"]
  )
  for name in ("device", "throughput", "train"):
    assert steps[name]["status"] == "ok", (name, steps[name])
  assert steps["replicas"]["status"] == "skipped: no GPU"
  for name in ("suite", "decode", "engines"):
    assert steps[name]["status"] == "skipped: --skip"

  device = steps["device"]["result"]
  assert device["gpus"] == 0 and device["tensorflow"]
  assert all(peak > 0 for peak in device["peaks"].values())
  variants = steps["throughput"]["result"]["variants"]
  assert {v["model"] for v in variants} == {"tfattn", "keras_mha"}
  assert all(v["mfu"] > 0 for v in variants)
  train = steps["train"]["result"]
  assert train["loop"]["steps_per_loop"] > 1 and train["single"]["steps_per_loop"] == 1
  for run in ("loop", "single"):
    assert train[run]["steps_per_second"] > 0
    assert set(train[run]["exact_match"]) == {"validation", "test"}
  assert os.path.isdir(tmp_path / "work" / "models" / "1")  # the default task's export

  markdown = (tmp_path / "gpu_pass.md").read_text()
  assert "| replicas | skipped: no GPU |" in markdown
  assert "## The default task end to end" in markdown
