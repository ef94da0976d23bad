"""`python -m train --task=text` packed (issue 41): the text files are one token stream in
blocks of --max_length with segment ids per document; evaluation judges every token of the
validation file (none dropped, only the last block padded) and reports the real-token share."""

import json
import math
import subprocess

import pytest
import tensorflow as tf

from tfattn import text
from train import streams

import warm_start
from train_helpers import REPO, environment, tiny_text_run

pytestmark = pytest.mark.slow  # a training subprocess


def test_a_packed_language_model_trains_and_judges_every_validation_token(tmp_path):
  config = tiny_text_run(tmp_path)
  fields = (
    "task train_file validation_file run_dir model d_model dff num_heads num_layers vocab_size "
    "vocab_examples batch_size max_length"
  ).split()
  args = [f"--{name}={config.flat()[name]}" for name in fields]
  args += ["--text_packing=documents", "--train_steps=6", "--warmup_steps=2", "--log_every=3"]
  result = subprocess.run(
    [*warm_start.python(), "-m", "train", *args],
    cwd=REPO,
    env=environment(),
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert result.returncode == 0, result.stderr[-3000:]
  judged = json.loads((tmp_path / "run" / "eval.json").read_text())["validation"]
  # Every token of the validation file (one document: its lines with their newlines) and its
  # END, as the run's own vocabulary tokenizes the pieces the file streams as.
  tokenizer = text.load_tokenizer(str(tmp_path / "run" / "vocab" / "source.model"))
  pieces = [
    t for t, _ in streams.text_pieces([config.data.validation_file], False).as_numpy_iterator()
  ]
  expected = int(tf.reduce_sum(tokenizer.tokenize(tf.constant(pieces)).row_lengths())) + 1
  assert judged["tokens"] == expected
  assert judged["examples"] == math.ceil(expected / config.model.max_length)  # no block dropped
  slots = judged["examples"] * config.model.max_length
  assert judged["real_token_share"] == pytest.approx(expected / slots)
  assert math.isfinite(judged["perplexity"]) and judged["perplexity"] > 1.0
