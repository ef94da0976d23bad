"""Local TSV files as a task: `source<TAB>target` (seq2seq) or `text<TAB>label` (classification)
lines, one file per data role (`--train_file`, `--validation_file`, `--test_file`)."""

import os
from typing import Optional

from train.task import (
  CLASSIFICATION,
  CLASSIFICATION_DEFAULTS,
  SEQ2SEQ,
  TSV_SEQ2SEQ_DEFAULTS,
  Task,
  strings_dataset,
)

# Without --validation_file, validation reads this many training lines (not held out).
UNHELD_VALIDATION_LINES = 1000


def read_tsv(path, kind):
  """Validates the whole file up front so bad lines fail with their line number."""
  if not os.path.isfile(path):
    raise ValueError(f"TSV file {path} does not exist (or is not a file)")
  pairs = []
  with open(path, "rb") as f:
    for number, raw in enumerate(f, 1):
      try:
        line = raw.decode("utf-8").rstrip("\n").rstrip("\r")
      except UnicodeDecodeError as error:
        raise ValueError(f"{path}:{number}: not valid UTF-8 ({error.reason} at byte "
                         f"{error.start} of the line); save the file as UTF-8") from None
      if not line.strip():
        continue
      fields = line.split("\t")
      if len(fields) != 2:
        raise ValueError(f"{path}:{number}: expected 2 tab-separated fields, got {len(fields)}")
      if kind == CLASSIFICATION:
        try:
          fields[1] = int(fields[1])
        except ValueError:
          raise ValueError(f"{path}:{number}: label {fields[1]!r} is not an integer") from None
        if fields[1] < 0:
          raise ValueError(f"{path}:{number}: label must be >= 0, got {fields[1]}")
      pairs.append(tuple(fields))
  if not pairs:
    raise ValueError(f"{path}: no examples")
  return pairs


def tsv_task(train_file: str, validation_file: Optional[str] = None,
             test_file: Optional[str] = None, kind: str = SEQ2SEQ) -> Task:
  """Reads (and checks) every given file now. Without a validation file, validation reads the
  first training lines, which are not held out: the start says so."""
  if kind not in (SEQ2SEQ, CLASSIFICATION):
    raise ValueError(f"tsv kind must be {SEQ2SEQ!r} or {CLASSIFICATION!r}, got {kind!r}")
  if not train_file:
    raise ValueError("--task=tsv needs --train_file")
  train_pairs = read_tsv(train_file, kind)
  validation_pairs = (read_tsv(validation_file, kind) if validation_file
                      else train_pairs[:UNHELD_VALIDATION_LINES])
  test_pairs = read_tsv(test_file, kind) if test_file else None
  note = ("" if validation_file else
          f"validation reads the first {len(validation_pairs)} training lines, which are not "
          "held out: pass --validation_file for an honest number")
  num_classes = 2
  if kind == CLASSIFICATION:
    labels = [y for _, y in train_pairs + validation_pairs + (test_pairs or [])]
    num_classes = max(max(labels) + 1, 2)
  defaults = CLASSIFICATION_DEFAULTS if kind == CLASSIFICATION else TSV_SEQ2SEQ_DEFAULTS
  return Task("tsv", kind, lambda: strings_dataset(train_pairs),
              lambda: strings_dataset(validation_pairs),
              (lambda: strings_dataset(test_pairs)) if test_pairs else None,
              num_classes=num_classes, defaults=dict(defaults), validation_note=note)
