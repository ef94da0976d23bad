"""`python -m serving.tools.predict` as a user runs it: a whole file through the fda25e5 seq2seq
fixture export, a run killed mid-way and resumed (nothing lost or doubled), bad lines, scoring
against a reference, and mistakes told in one line before TensorFlow loads."""

import os
import signal
import subprocess
import time

import pytest

import warm_start
from train_helpers import COLD, REPO, environment, run_recording_imports

pytestmark = pytest.mark.slow  # runs the program in subprocesses

FIXTURES = os.path.join(REPO, "tests", "fixtures", "fda25e5")
MODEL = os.path.join(FIXTURES, "export_seq2seq")


def _command(*flags, python=None):
  """The program's command, warm started (tests/warm_start.py) unless `python` is given."""
  return [
    *(python or warm_start.python()),
    "-m",
    "serving.tools.predict",
    f"--model={MODEL}",
    "--progress_every=0",
    *flags,
  ]


def _run(*flags, check=True, python=None):
  result = subprocess.run(
    _command(*flags, python=python),
    cwd=REPO,
    env=environment(),
    capture_output=True,
    text=True,
    timeout=300,
  )
  if check:
    assert result.returncode == 0, result.stderr[-3000:]
  return result


def _write_pairs(path, count):
  """`count` lines of the fixture's digit pairs (source TAB reversed), lengths mixed."""
  with open(os.path.join(FIXTURES, "seq2seq.tsv"), encoding="utf-8") as f:
    pairs = f.read().splitlines()
  path.write_text("".join(pairs[i % len(pairs)] + "\n" for i in range(count)))
  return str(path)


def open_lines(path):
  with open(path, encoding="utf-8") as f:
    return f.read().splitlines()


def _chunks(parts):
  return [name for name in os.listdir(parts) if name.endswith(".txt")] if parts.exists() else []


def test_a_killed_run_resumes_with_nothing_lost_or_doubled(tmp_path):
  pairs = _write_pairs(tmp_path / "pairs.tsv", 600)
  # The whole file at once, as a pipe: stdin, its first column, stdout, scored on stderr.
  with open(pairs, encoding="utf-8") as stdin:
    piped = subprocess.run(
      _command(
        "--input=-", "--column=1", f"--reference={pairs}", "--reference_column=2", python=COLD
      ),
      stdin=stdin,
      cwd=REPO,
      env=environment(),
      capture_output=True,
      text=True,
      timeout=300,
    )
  assert piped.returncode == 0, piped.stderr[-3000:]
  score = piped.stderr.strip().splitlines()[-1]
  assert score.startswith("BLEU ") and "| lowercased BLEU " in score and "| chrF " in score
  assert "nrefs:1|case:mixed|eff:no|tok:13a" in score and "case:lc" in score
  source = tmp_path / "in.txt"
  source.write_text("".join(line.split("\t")[0] + "\n" for line in open_lines(pairs)))
  output, parts = tmp_path / "out.txt", tmp_path / "out.txt.parts"
  flags = (f"--input={source}", f"--output={output}", "--window=4", "--batch_size=4")
  # Cold, the runs compared here: a SIGKILL ends a real process at once (a warm one a moment
  # after its launcher), and each run has its own hash seed, as users' runs have.
  process = subprocess.Popen(
    _command(*flags, python=COLD),
    cwd=REPO,
    env=environment(),
    stdout=subprocess.DEVNULL,
    stderr=subprocess.PIPE,
  )
  deadline = time.time() + 120
  while len(_chunks(parts)) < 3:  # polls the folder: the run's own progress, not a clock
    assert process.poll() is None, process.stderr.read().decode()[-2000:]
    assert time.time() < deadline, "no chunk written in 120 s"
    time.sleep(0.05)
  process.send_signal(signal.SIGKILL)  # a crash: no handler runs
  process.wait()
  process.stderr.close()
  done = len(_chunks(parts))
  assert not output.exists() and 3 <= done < 150  # killed mid-way
  again = _run(*flags, check=False)
  assert again.returncode == 2 and "add --resume to continue it" in again.stderr
  other = _run(*flags[:2], "--window=8", "--resume", check=False)
  assert other.returncode == 2 and "other settings" in other.stderr and "(window)" in other.stderr
  resumed = _run(*flags, "--resume", python=COLD)
  assert f"600 lines ({600 - 4 * done:,} in this run)" in resumed.stderr
  assert output.read_text() == piped.stdout  # other windows and batches, the same answers
  assert len(piped.stdout.splitlines()) == 600
  assert not parts.exists()


def test_bad_lines_fail_naming_file_and_line_or_leave_their_place(tmp_path):
  source = tmp_path / "in.txt"
  source.write_bytes(b"1 2 3\n4 5\n\xff\xfe 6\n7 8 9\n")
  output = tmp_path / "out.txt"
  failed = _run(f"--input={source}", f"--output={output}", "--window=2", check=False)
  assert failed.returncode == 1
  assert failed.stderr.strip().splitlines()[-1] == (
    f"serving.tools.predict: error: {source}:3: not valid UTF-8 (byte 1) (--bad_lines=skip leaves "
    "an empty line in its place; the finished chunks are kept: --resume continues)"
  )
  assert _chunks(tmp_path / "out.txt.parts") == ["00000-000000000.txt"]  # lines 1-2 kept
  skipped = _run(
    f"--input={source}", f"--output={output}", "--window=2", "--bad_lines=skip", "--resume"
  )
  assert "1 bad line(s) skipped in this run" in skipped.stderr
  lines = output.read_text().split("\n")
  assert len(lines) == 5 and lines[2] == "" and all(lines[i] for i in (0, 1, 3))


def test_progress_counts_batches_and_a_first_window_failure_keeps_no_chunk_folder(tmp_path):
  """A file shorter than a window shows progress batch by batch (it showed none until done);
  a bad line before any chunk was finished leaves no folder and promises no kept chunk."""
  source = tmp_path / "in.txt"
  source.write_bytes(b"1 2\n3 4\n5 6\n7 8\n9 1\n2 3\n\xff\n")
  output = tmp_path / "out.txt"
  failed = _run(
    f"--input={source}",
    f"--output={output}",
    "--batch_size=2",
    "--progress_every=1e-9",
    check=False,
  )
  assert failed.returncode == 1
  lines = failed.stderr.strip().splitlines()
  assert lines[-1] == (
    f"serving.tools.predict: error: {source}:7: not valid UTF-8 (byte 1) (--bad_lines=skip "
    "leaves an empty line in its place)"
  )
  for done in (2, 4, 6):
    assert any(f"serving.tools.predict: {done} of 7 lines (" in line for line in lines), done
  assert not (tmp_path / "out.txt.parts").exists() and not output.exists()
  again = _run(f"--input={source}", "--bad_lines=skip")
  summary = again.stderr.strip().splitlines()[-1]
  assert summary.startswith("serving.tools.predict: 7 lines, ") and " lines/s in " in summary
  assert "once TensorFlow and the export had loaded, in " in summary
  assert again.stdout.count("\n") == 7


@pytest.mark.parametrize(
  "flags,message",
  [
    ([f"--input={MODEL}/nothing*.txt"], "--input pattern {MODEL}/nothing*.txt matches no file"),
    (["--input=-", "--resume"], "--resume needs --output=FILE (stdout cannot be resumed)"),
    (["--input=-", "--model={tmp}"], "--model={tmp} holds no SavedModel: give an export base path"),
  ],
  ids=["glob", "resume_stdout", "model"],
)
def test_a_mistake_is_told_in_one_line_before_tensorflow_loads(tmp_path, flags, message):
  command = _command(*[f.format(tmp=tmp_path) for f in flags], python=COLD)
  result, imported = run_recording_imports(command[1:])
  assert result.returncode == 2
  assert "cli" in imported and "tensorflow" not in imported
  last = result.stderr.strip().splitlines()[-1]
  assert last.startswith(
    "serving.tools.predict: error: " + message.format(MODEL=MODEL, tmp=tmp_path)
  )
