"""serving/tools/beam_predict.py: the Beam pipeline (FnApiRunner, in this process) over a small file
gives `python -m serving.tools.predict`'s output line for line; a bad line fails it naming its
file:line, or leaves an empty line in its place."""

import os
import subprocess

import pytest

from serving.tools import batch_files, batch_model, beam_predict

import warm_start
from train_helpers import REPO, environment, own_lines

pytestmark = pytest.mark.slow  # runs Beam pipelines over a real export

FIXTURES = os.path.join(REPO, "tests", "fixtures", "fda25e5")
EXPORT = os.path.join(FIXTURES, "export_seq2seq", "1")


def _sources(path, count):
  with open(os.path.join(FIXTURES, "seq2seq.tsv"), encoding="utf-8") as f:
    sources = [line.split("\t")[0] for line in f]
  path.write_bytes("".join(sources[i % len(sources)] + "\n" for i in range(count)).encode())
  return str(path)


def _predict_loop(path, output_format=batch_model.TEXT):
  """What serving.tools.predict writes for a file (its own loop, in this process)."""
  model = batch_model.BatchModel(EXPORT, "serving_default", output_format)
  with open(path, "rb") as stream:
    window = list(batch_files.read_lines(stream, path, 0))
  return [output for _, output, _ in batch_model.run_window(model, window, 64, sort=True)]


def test_the_pipeline_writes_the_single_process_output_line_for_line(tmp_path):
  first = _sources(tmp_path / "a.txt", 70)
  second = _sources(tmp_path / "b.txt", 25)
  output = tmp_path / "out.txt"
  chunks = beam_predict.run(EXPORT, [first, second], str(output), batch_size=16, chunk_lines=16)
  assert chunks == 5 + 2  # 70 lines in chunks of 16, then 25
  expected = _predict_loop(first) + _predict_loop(second)
  assert output.read_text().splitlines() == expected
  assert not (tmp_path / "out.txt.parts").exists()


def test_empty_lines_get_the_same_answer_from_predict_beam_and_alone(exported, tmp_path):
  """An empty source is all padding: its answer once depended on its batch-mates' padding, so
  predict (sorted batches of 64) and the pipeline (batches of up to 5) wrote other lines."""
  _, path = exported
  texts = ["", "12", "", "4213", "98765", "", "7", "31", "5550", ""] * 2
  source = tmp_path / "in.txt"
  source.write_text("".join(text + "\n" for text in texts))
  output = tmp_path / "out.txt"
  beam_predict.run(path, [str(source)], str(output), batch_size=5, chunk_lines=4)
  model = batch_model.BatchModel(path, "serving_default", batch_model.TEXT)
  window = _lines_of(source)
  sorted_batches = [out for _, out, _ in batch_model.run_window(model, window, 64, sort=True)]
  alone = [model.predict([line])[0][1] for line in window]
  assert output.read_text().splitlines() == sorted_batches == alone


def _lines_of(path):
  with open(path, "rb") as stream:
    return list(batch_files.read_lines(stream, str(path), 0))


def test_a_bad_line_fails_the_pipeline_by_name_or_leaves_its_place(tmp_path):
  source = tmp_path / "in.txt"
  source.write_bytes(b"1 2 3\n\xff 4\n5 6\n")
  output = str(tmp_path / "out.txt")
  with pytest.raises(Exception) as failed:
    beam_predict.run(EXPORT, [str(source)], output)
  assert beam_predict.bad_line_message(failed.value) == (
    f"{source}:2: not valid UTF-8 (byte 1) (--bad_lines=skip leaves an empty line)"
  )
  beam_predict.run(EXPORT, [str(source)], output, bad_lines="skip", output_format="jsonl")
  with open(output, encoding="utf-8") as f:
    lines = f.read().splitlines()
  assert len(lines) == 3 and lines[1] == f'{{"error": "{source}:2: not valid UTF-8 (byte 1)"}}'


@pytest.mark.slow
def test_the_program_says_a_bad_line_in_one_line(tmp_path):
  source = tmp_path / "in.txt"
  source.write_bytes(b"1 2\n\xff\n")
  result = subprocess.run(
    [
      *warm_start.python(),
      "-m",
      "serving.tools.beam_predict",
      f"--model={EXPORT}",
      f"--input={source}",
      f"--output={tmp_path / 'out.txt'}",
    ],
    cwd=REPO,
    env=environment(),
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert result.returncode == 1
  # Only that line: no traceback of the failing bundle before it, no notes of Beam's imports.
  assert own_lines(result.stderr) == [
    f"serving.tools.beam_predict: error: {source}:2: not valid UTF-8 (byte 1) (--bad_lines=skip "
    "leaves an empty line)"
  ]


def test_the_models_own_error_is_told_like_a_bad_line():
  told = batch_model.ModelError("models/x/1 refused a batch of 3 lines (f:1 to f:3) that ...")
  wrapped = RuntimeError("the pipeline failed")
  wrapped.__cause__ = told
  assert beam_predict.bad_line_message(wrapped) == str(told)
  remote = RuntimeError(f"Traceback ...\nModelError: {told} [while running 'RunInference']")
  assert beam_predict.bad_line_message(remote) == str(told)


def test_an_interrupted_predict_run_is_never_deleted(tmp_path):
  output = tmp_path / "out.txt"
  (tmp_path / "out.txt.parts").mkdir()
  (tmp_path / "out.txt.parts" / batch_files.SETTINGS_FILE).write_text("{}")
  with pytest.raises(ValueError, match=r"holds an interrupted serving\.tools\.predict run"):
    beam_predict.run(EXPORT, [_sources(tmp_path / "a.txt", 3)], str(output))
  assert (tmp_path / "out.txt.parts" / batch_files.SETTINGS_FILE).exists()
