"""The data-file flags of `--task=tsv` and `--task=text`, checked before TensorFlow loads: a
missing --train_file, a local path that does not exist and a local glob that matches nothing
are told at once, in the words the task would use. The task checks every path again when it
loads (with `tf.io.gfile`, which also reads remote paths such as gs://, skipped here)."""

import glob
import os
from typing import List

# The tasks that read --train_file, --validation_file and --test_file, and what they call a file.
FILE_TASKS = {"tsv": "TSV file", "text": "text file"}
ROLES = ("train_file", "validation_file", "test_file")
_GLOB_CHARACTERS = "*?["


def spec_parts(spec: str) -> List[str]:
  """A flag's comma list of paths and globs -> its parts, blanks dropped."""
  return [part for part in (p.strip() for p in spec.split(",")) if part]


def is_glob(part: str) -> bool:
  return any(c in part for c in _GLOB_CHARACTERS)


def no_match(flag: str, part: str) -> ValueError:
  return ValueError(f"--{flag}: no file matches {part}")


def needs_train_file(task: str) -> ValueError:
  return ValueError(f"--task={task} needs --train_file")


def missing_file(what: str, path: str) -> ValueError:
  return ValueError(f"{what} {path} does not exist (or is not a file)")


def check_local_files(config) -> None:
  """Raises ValueError for the first missing file of a file task (`config`: the run's data
  section, `train.sections.data.Data`)."""
  what = FILE_TASKS.get(config.task)
  if what is None:
    return
  if not config.train_file:
    raise needs_train_file(config.task)
  for flag in ROLES:
    for part in spec_parts(getattr(config, flag) or ""):
      if "://" in part:
        continue
      if is_glob(part):
        if not glob.glob(part, include_hidden=True):
          raise no_match(flag, part)
      elif not os.path.exists(part) or os.path.isdir(part):
        raise missing_file(what, part)
