"""benchmarks/batch_predict.py at a tiny size, every mode: the fda25e5 seq2seq fixture export
over 24 lines (sorted and unsorted, REST with 2 clients, Beam in-process, memory at two
sizes) prints each rate, the ratios, and Beam's output identical to serving.tools.predict's."""

import os
import re
import subprocess
import sys

import pytest

import warm_start
from train_helpers import REPO, environment

pytestmark = pytest.mark.slow  # a server, a Beam pipeline and predict runs in subprocesses


def test_every_mode_prints_its_rate_and_the_ratios(temp_folder_left_empty):
  """Without --work_dir: its files go to a temporary folder it removes (TMPDIR, checked
  empty), as do those of the programs it starts."""
  fixtures = os.path.join(REPO, "tests", "fixtures", "fda25e5")
  result = subprocess.run(
    [
      *warm_start.python(),
      os.path.join("benchmarks", "batch_predict.py"),
      f"--model={os.path.join(fixtures, 'export_seq2seq')}",
      f"--input={os.path.join(fixtures, 'seq2seq.tsv')}",
      "--lines=24",
      "--batch_size=8",
      "--window=16",
      "--clients=2",
      "--rounds=1",
      "--memory_factor=2",
      "--beam_workers=1",  # the pipeline in the benchmark's process: one TensorFlow start less
    ],
    cwd=REPO,
    # Its children cold: it reads their peak RSS.
    env=environment(TFATTN_WARM_START="0", TMPDIR=str(temp_folder_left_empty)),
    capture_output=True,
    text=True,
    timeout=600,
  )
  assert result.returncode == 0, result.stderr[-3000:]
  out = result.stdout
  for pattern in (
    r"sorted: [\d,.]+ lines/s \(median of [\d,.]+\); [\d,.]+ lines per CPU-second",
    r"unsorted: [\d,.]+ lines/s \(median of [\d,.]+\); [\d,.]+ lines per CPU-second",
    r"sorted and unsorted outputs: 24 of 24 lines equal",
    r"rest \(2 clients, one line a request\): [\d,.]+ lines/s; 24 of 24 answers equal",
    r"beam \(FnApiRunner, 1 worker\(s\).*\): [\d,.]+ lines/s; output identical to "
    r"serving.tools.predict's: True",
    r"memory: 24 lines: peak RSS [\d,]+ MB",
    r"memory: 48 lines: peak RSS [\d,]+ MB",
    r"sorted / unsorted batching: [\d.]+x \(per CPU-second: [\d.]+x\)",
    r"file command \(sorted\) / REST: [\d.]+x",
    r"peak RSS at 2x the lines: [\d.]+x",
  ):
    assert re.search(pattern, out), (pattern, out)
  # The input is the TSV's first column, cut to --lines.
  assert out.startswith("24 lines of "), out[:200]


@pytest.mark.parametrize(
  "flag, message",
  [("--modes=fast", "--modes: unknown ['fast']"), ("--batch_size=0", "--batch_size must be >= 1")],
)
def test_a_flag_mistake_is_a_usage_error(flag, message):
  result = subprocess.run(
    [sys.executable, os.path.join("benchmarks", "batch_predict.py"), flag],
    cwd=REPO,
    env=environment(),
    capture_output=True,
    text=True,
    timeout=60,
  )
  assert result.returncode == 2 and message in result.stderr
