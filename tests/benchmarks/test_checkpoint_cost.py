"""benchmarks/checkpoint_cost.py at a tiny size: both ways of reading the training examples are
saved and timed side by side, the permuted one's checkpoint is the smaller (a position, not the
examples), and the work folder is removed (no timed assertions)."""

import re
import subprocess

import pytest

import warm_start
from train_helpers import REPO, environment

pytestmark = pytest.mark.slow  # two Trainers in a subprocess


def _run(*flags, env=None):
  return subprocess.run(
    [*warm_start.python(), "benchmarks/checkpoint_cost.py", *flags],
    cwd=REPO,
    env=env or environment(),
    capture_output=True,
    text=True,
    timeout=300,
  )


def test_both_ways_of_reading_the_examples_are_saved_side_by_side(temp_folder_left_empty):
  result = _run(
    "--examples=300",
    "--rounds=2",
    "--batches=2",
    "--model=tiny",
    env=environment(TMPDIR=str(temp_folder_left_empty)),
  )
  assert result.returncode == 0, result.stderr[-3000:]
  sizes = {}
  for variant in ("permuted", "shuffle buffer"):
    line = re.search(
      rf"^{variant} +save +([0-9.]+) s wall, +([0-9.]+) CPU s, +([0-9.]+) MB$",
      result.stdout,
      re.M,
    )
    assert line, result.stdout
    assert float(line[1]) > 0 and float(line[2]) > 0
    sizes[variant] = float(line[3])
  assert 0 < sizes["permuted"] < sizes["shuffle buffer"], sizes
  assert re.search(r"^shuffle buffer / permuted: [0-9.]+x the wall time", result.stdout, re.M)
  assert "median of 2 rounds" in result.stdout


def test_a_flag_mistake_is_one_line_before_tensorflow():
  result = _run("--examples=5")
  assert result.returncode == 2
  assert result.stderr.strip().splitlines() == [
    "checkpoint_cost.py: error: --examples must be >= 100, got 5"
  ], result.stderr
