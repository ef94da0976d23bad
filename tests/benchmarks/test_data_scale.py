"""benchmarks/data_scale.py on a small size: the seeded corpus, a real training process per
size, and the side-by-side table of peak RSS, vocabulary seconds, first step and steps/s."""

import os
import re
import subprocess

import pytest

import warm_start
from train_helpers import REPO, environment

pytestmark = pytest.mark.slow  # trains twice in subprocesses

ROWS = (
  "peak RSS (MB)",
  "vocabulary (s)",
  "of which the sampling pass (s)",
  "first step after vocabulary (s)",
  "process start to first step (s)",
  "steps/s",
)


def test_corpus_is_seeded_and_shaped_like_wmt(tmp_path):
  import data_scale  # benchmarks/ is on the tests' path (pyproject.toml)

  sizes = [data_scale.write_corpus(tmp_path / f"{i}.tsv", 500, seed=3) for i in range(2)]
  assert (
    sizes[0] == sizes[1] and (tmp_path / "0.tsv").read_bytes() == (tmp_path / "1.tsv").read_bytes()
  )
  lines = (tmp_path / "0.tsv").read_text(encoding="utf-8").splitlines()
  assert len(lines) == 500 and all(line.count("\t") == 1 for line in lines)
  assert 120 < sizes[0] / 500 < 400  # bytes a line, about WMT's


def test_two_sizes_print_side_by_side(tmp_path):
  result = subprocess.run(
    [
      *warm_start.python(),
      os.path.join("benchmarks", "data_scale.py"),
      "--lines=300,600",
      "--train_steps=3",
      f"--work_dir={tmp_path}/work",
      "--extra_flag=--vocab_size=300",
    ],
    cwd=REPO,
    # Its training runs cold: it reads each run's peak RSS from wait4, which a warm launcher's
    # would answer for.
    env=environment(TFATTN_WARM_START="0"),
    capture_output=True,
    text=True,
    timeout=600,
  )
  assert result.returncode == 0, result.stderr[-3000:]
  table = result.stdout
  assert re.search(r"\s+300\s+600\n", table), table
  for row in ROWS:
    values = re.search(re.escape(row) + r"\s+([\d.]+)\s+([\d.]+)", table)
    assert values and all(float(v) > 0 for v in values.groups()), (row, table)
  rss = re.search(r"([\d.]+)\s+([\d.]+)", table[table.index("peak RSS (MB)") :]).groups()
  assert all(200 < float(v) < 4000 for v in rss)  # a TensorFlow process, in MB
  assert "peak RSS, largest / smallest corpus:" in table
  assert not os.path.exists(tmp_path / "work")  # the corpora are removed
