"""benchmarks/quality.py end to end on a tiny aclImdb-shaped folder the test writes: the real
CLI trains each seed, and the report gives validation and test over the seeds."""

import os
import subprocess
import sys

import pytest

from train_helpers import REPO, environment

pytestmark = pytest.mark.slow  # trains twice in subprocesses


def _write_aclimdb(root):
  words = {0: ["dull", "awful", "boring", "bad"], 1: ["great", "moving", "superb", "good"]}
  for split, count in (("train", 40), ("test", 12)):
    for label, name in ((0, "neg"), (1, "pos")):
      folder = root / split / name
      folder.mkdir(parents=True)
      for i in range(count // 2):
        review = " ".join(words[label][(i + j) % 4] for j in range(6)) + " film."
        (folder / f"{i}_{3 if label == 0 else 8}.txt").write_text(review)


def test_two_seeds_of_a_recipe_report_validation_and_test(tmp_path):
  _write_aclimdb(tmp_path / "aclImdb")
  result = subprocess.run(
    [
      sys.executable,
      os.path.join("benchmarks", "quality.py"),
      f"--imdb={tmp_path}/aclImdb",
      "--recipes=imdb_attention",
      "--seeds=2",
      f"--work_dir={tmp_path}/work",
      "--extra_flag=--train_steps=2",
      "--extra_flag=--batch_size=8",
      "--extra_flag=--vocab_size=300",
      "--extra_flag=--log_every=1",
    ],
    cwd=REPO,
    env=environment(),
    capture_output=True,
    text=True,
    timeout=600,
  )
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  rows = [line for line in result.stdout.splitlines() if line.startswith("| imdb_attention")]
  assert len(rows) == 2, result.stdout[-3000:]  # one per anchor
  assert all("(2 seeds)" in row and "±" in row for row in rows), rows
  # 10% of the 40 training reviews are validation; the 12 test reviews are judged whole.
  with open(tmp_path / "work" / "imdb_validation.tsv") as f:
    assert len(f.readlines()) == 4
  for seed in (0, 1):
    assert os.path.exists(tmp_path / "work" / f"imdb_attention-seed{seed}" / "eval.json")
  assert '"examples": 12' in result.stdout
