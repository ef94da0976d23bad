"""`--task=text`: plain UTF-8 text files, one text a line, one file per data role: the language
model's task."""

import os

from tfattn import kinds
from train import streams
from train.task import LANGUAGE_MODEL_DEFAULTS, Task, strings_dataset
from train.tsv_tasks import UNHELD_VALIDATION_LINES


def text_task(train_file, validation_file=None, test_file=None) -> Task:
  """Plain UTF-8 text files, one text a line (blank lines skipped), one file per data role:
  the language model's task (`--task=text`). Without a validation file, validation reads the
  first training lines, which are not held out: the start says so."""
  if not train_file:
    raise ValueError("--task=text needs --train_file")
  train_lines = _read_lines(train_file)
  validation_lines = (
    _read_lines(validation_file) if validation_file else train_lines[:UNHELD_VALIDATION_LINES]
  )
  test_lines = _read_lines(test_file) if test_file else None
  note = (
    ""
    if validation_file
    else f"validation reads the first {len(validation_lines)} training lines, which are not "
    "held out: pass --validation_file for an honest number"
  )

  def examples(lines):
    return lambda: strings_dataset([(line, "") for line in lines])

  return Task(
    "text",
    kinds.LANGUAGE_MODEL,
    examples(train_lines),
    examples(validation_lines),
    examples(test_lines) if test_lines else None,
    defaults=dict(LANGUAGE_MODEL_DEFAULTS),
    validation_note=note,
  )


def _read_lines(path):
  """Every non-blank line of a UTF-8 file, checked now (a bad byte fails with its line)."""
  if not os.path.isfile(path):
    raise ValueError(f"text file {path} does not exist (or is not a file)")
  lines = []
  with open(path, "rb") as f:
    for number, raw in enumerate(f, 1):
      try:
        line = streams.decode_line(raw)
      except ValueError as error:
        raise ValueError(f"{path}:{number}: {error}") from None
      if line.strip():
        lines.append(line)
  if not lines:
    raise ValueError(f"{path}: no text")
  return lines
