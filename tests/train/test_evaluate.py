"""`python -m train.evaluate`: a trained run's checkpoint judged on a file, whole by default,
its result written as JSON; the latest or the best weights; mistakes in one line. A tiny
language model trained a few steps, kept best by nats per character (issue 41)."""

import json
import subprocess

import pytest

from train.trainer import Trainer, prepare

import warm_start
from train_helpers import REPO, environment, own_lines, run_recording_imports, tiny_text_run

pytestmark = pytest.mark.slow  # trains, then starts the program


def _evaluate(*flags):
  return subprocess.run(
    [*warm_start.python(), "-m", "train.evaluate", *flags],
    cwd=REPO,
    env=environment(),
    capture_output=True,
    text=True,
    timeout=300,
  )


def test_a_checkpoint_is_judged_on_a_file_whole_or_in_part(tmp_path):
  config = tiny_text_run(
    tmp_path,
    train_steps=8,
    warmup_steps=2,
    log_every=4,
    eval_every=4,
    checkpoint_every=8,
    eval_examples=2,  # the in-run evaluations are partial: 2 of the validation file's blocks
    text_packing="blocks",  # packed, as --task=text trains by default
    keep_best_by="nats_per_char",
    attention_images=0,
  )
  result = Trainer(*prepare(config)).run()
  run_dir = config.run_dir
  assert result["weights"]["chosen_by"] == "best nats_per_char on validation"
  assert result["validation"]["partial"] is True and result["validation"]["examples"] == 2
  train_log = (tmp_path / "run" / "train_log.jsonl").read_text().splitlines()
  seen = [json.loads(line)["tokens_seen"] for line in train_log]
  # Tokens trained on so far (at most batch 8 x 16 tokens a step), growing.
  assert 0 < seen[0] < seen[1] <= 8 * 8 * 16 and len(seen) == 2

  # The best weights, on the validation file's first 2 blocks: the run's own final number.
  output = tmp_path / "judged.json"
  done = _evaluate(
    f"--run_dir={run_dir}",
    f"--file={config.data.validation_file}",
    "--weights=best",
    "--max_examples=2",
    f"--output={output}",
  )
  assert done.returncode == 0, done.stderr[-3000:]
  judged = json.loads(output.read_text())
  assert judged["weights"] == "best" and judged["checkpoint"].startswith("best/best-")
  for name in ("perplexity", "nats_per_char", "bits_per_byte"):
    assert judged["metrics"][name] == pytest.approx(result["validation"][name], rel=1e-4), name
  assert judged["metrics"]["partial"] is True and "partial: the first 2 examples" in done.stdout

  # By default the whole file and the latest weights, written into the run directory.
  done = _evaluate(f"--run_dir={run_dir}", f"--file={config.data.test_file}")
  assert done.returncode == 0, done.stderr[-3000:]
  whole = json.loads((tmp_path / "run" / "evaluations" / "test.txt.json").read_text())
  assert whole["checkpoint"] == "ckpt-8" and whole["step"] == 8
  # Every block of the file: its tokens (newlines and [END] included) in blocks of 16, the last
  # one padded.
  blocks = -(-whole["metrics"]["tokens"] // 16)
  assert whole["metrics"]["examples"] == blocks and whole["metrics"]["partial"] is False
  assert whole["metrics"]["nats_per_char"] > 0 and "partial" not in done.stdout

  (tmp_path / "latin1.txt").write_bytes(b"caf\xe9\n")
  mistakes = {
    "--file=MISSING": "does not exist",
    f"--file={tmp_path / 'latin1.txt'}": "latin1.txt:1: not valid UTF-8",
    "--max_examples=0": "--max_examples must be positive",
  }
  for flag, message in mistakes.items():
    done = _evaluate(f"--run_dir={run_dir}", flag)
    ours = own_lines(done.stderr)
    assert done.returncode == 2 and len(ours) == 1, (flag, done.stderr[-2000:])
    assert ours[0].startswith("train.evaluate: error: ") and message in ours[0], ours
  done = _evaluate(f"--run_dir={tmp_path}")
  assert done.returncode == 2 and "not a training run directory" in done.stderr
  # Told before TensorFlow loads.
  done, imported = run_recording_imports(
    ["-m", "train.evaluate", f"--run_dir={run_dir}", "--weights=best", "--file=MISSING"]
  )
  assert done.returncode == 2 and "tensorflow" not in imported, done.stderr[-2000:]
