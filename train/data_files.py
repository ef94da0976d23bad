"""The data-file flags of `--task=tsv` and `--task=text`, checked before TensorFlow loads: a
missing --train_file, a local path that does not exist and a local glob that matches nothing
are told at once, in the words the task would use. The task checks every path again when it
loads (with `tf.io.gfile`, which also reads remote paths such as gs://, skipped here)."""

import glob
import os

# The tasks that read --train_file, --validation_file and --test_file, and what they call a file.
FILE_TASKS = {"tsv": "TSV file", "text": "text file"}
ROLES = ("train_file", "validation_file", "test_file")
_GLOB_CHARACTERS = "*?["


def check_local_files(config) -> None:
  """Raises ValueError for the first missing file of a file task (`config`: a RunConfig)."""
  what = FILE_TASKS.get(config.task)
  if what is None:
    return
  if not config.train_file:
    raise ValueError(f"--task={config.task} needs --train_file")
  for flag in ROLES:
    for part in (p.strip() for p in (getattr(config, flag) or "").split(",")):
      if not part or "://" in part:
        continue
      if any(c in part for c in _GLOB_CHARACTERS):
        if not glob.glob(part, include_hidden=True):
          raise ValueError(f"--{flag}: no file matches {part}")
      elif not os.path.exists(part) or os.path.isdir(part):
        raise ValueError(f"{what} {part} does not exist (or is not a file)")
