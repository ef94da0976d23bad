"""benchmarks/attention_alignment.py: finding a noun's pieces, and the whole check end to end on
a small export and test files the test writes."""

import os
import subprocess

import pytest

import attention_alignment as alignment  # benchmarks/ is on pytest's pythonpath
import warm_start
from train_helpers import REPO, environment


def test_pieces_of_a_word_in_lossless_pieces():
  pieces = ["Ein", " M", "ann", " sch", "läft", ".", "[END]"]
  spans = alignment.piece_spans(pieces)
  assert "".join(pieces[:-1]) == "Ein Mann schläft."
  start, end = alignment.word_span("Ein Mann schläft.", "Mann", ignore_case=False)
  assert alignment.pieces_overlapping(spans, start, end) == [1, 2]
  assert alignment.first_piece_at(spans, start) == 1
  assert alignment.word_span("Männer", "Mann", False) is None  # whole words only
  assert alignment.word_span("A MAN.", "man", ignore_case=True) == (2, 5)


@pytest.mark.slow
def test_the_check_runs_on_an_export(exported, tmp_path):
  base, _ = exported
  (tmp_path / "test_2016_flickr.de").write_text("Ein Mann schläft.\nEin Hund.\n")
  (tmp_path / "test_2016_flickr.en").write_text("A man sleeps.\nA dog.\n")
  result = subprocess.run(
    [
      *warm_start.python(),
      os.path.join("benchmarks", "attention_alignment.py"),
      f"--model_base_path={base}",
      f"--multi30k={tmp_path}",
      f"--results={tmp_path}/results.json",
    ],
    cwd=REPO,
    env=environment(),
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
  assert "2 (sentence, noun pair) cases in 2 of 2 test sentences" in result.stdout
  assert "| decoder layer |" in result.stdout
