"""Local TSV files as a task: `source<TAB>target` (seq2seq) or `text<TAB>label` (classification)
lines, one file per data role (`--train_file`, `--validation_file`, `--test_file`)."""

import os
from typing import Optional

from train import kinds
from train.task import (
  CLASSIFICATION,
  CLASSIFICATION_DEFAULTS,
  SEQ2SEQ,
  TSV_SEQ2SEQ_DEFAULTS,
  Task,
  strings_dataset,
)

# Training defaults by kind; a kind without an entry starts from the recipe and the fallbacks.
DEFAULTS = {SEQ2SEQ: TSV_SEQ2SEQ_DEFAULTS, CLASSIFICATION: CLASSIFICATION_DEFAULTS}

# Without --validation_file, validation reads this many training lines (not held out).
UNHELD_VALIDATION_LINES = 1000


def read_tsv(path, kind):
  """Validates the whole file up front so bad lines fail with their line number; the second
  column is read by the task kind (`TrainingKind.parse_target`)."""
  parse_target = kinds.of(kind).parse_target
  if not os.path.isfile(path):
    raise ValueError(f"TSV file {path} does not exist (or is not a file)")
  pairs = []
  with open(path, "rb") as f:
    for number, raw in enumerate(f, 1):
      try:
        line = raw.decode("utf-8").rstrip("\n").rstrip("\r")
      except UnicodeDecodeError as error:
        raise ValueError(
          f"{path}:{number}: not valid UTF-8 ({error.reason} at byte "
          f"{error.start} of the line); save the file as UTF-8"
        ) from None
      if not line.strip():
        continue
      fields = line.split("\t")
      if len(fields) != 2:
        raise ValueError(f"{path}:{number}: expected 2 tab-separated fields, got {len(fields)}")
      try:
        fields[1] = parse_target(fields[1])
      except ValueError as error:
        raise ValueError(f"{path}:{number}: {error}") from None
      pairs.append(tuple(fields))
  if not pairs:
    raise ValueError(f"{path}: no examples")
  return pairs


def tsv_task(
  train_file: str,
  validation_file: Optional[str] = None,
  test_file: Optional[str] = None,
  kind: str = SEQ2SEQ,
) -> Task:
  """Reads (and checks) every given file now. Without a validation file, validation reads the
  first training lines, which are not held out: the start says so."""
  kind_object = kinds.of(kind)  # a ValueError naming the known kinds
  if not train_file:
    raise ValueError("--task=tsv needs --train_file")
  train_pairs = read_tsv(train_file, kind)
  validation_pairs = (
    read_tsv(validation_file, kind) if validation_file else train_pairs[:UNHELD_VALIDATION_LINES]
  )
  test_pairs = read_tsv(test_file, kind) if test_file else None
  note = (
    ""
    if validation_file
    else f"validation reads the first {len(validation_pairs)} training lines, which are not "
    "held out: pass --validation_file for an honest number"
  )
  num_classes = kind_object.count_classes(
    [y for _, y in train_pairs + validation_pairs + (test_pairs or [])]
  )
  return Task(
    "tsv",
    kind,
    lambda: strings_dataset(train_pairs),
    lambda: strings_dataset(validation_pairs),
    (lambda: strings_dataset(test_pairs)) if test_pairs else None,
    num_classes=num_classes,
    defaults=dict(DEFAULTS.get(kind, {})),
    validation_note=note,
  )
