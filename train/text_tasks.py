"""`--task=text`: plain UTF-8 text files, one file list per data role (each a comma list of paths
or globs): the language model's task.

Every role streams (`streams.text_pieces`): memory does not grow with the corpus. How the text
becomes examples is `--text_packing` (docs/language_model.md):

* blocks (the default) and documents: the files are one token stream, cut into blocks of
  `max_length` (`train/language_model_data.py`). A document is a whole file, its newlines
  kept as text (`--text_documents=file`), or a line (`line`); [END] follows each document.
  With documents, attention and positions restart at each document (segment ids).
* lines: one example a non-blank line, starting at [START], cut at `max_length`.

The first `HEAD_LINES` lines of each file are checked in Python before anything is written, so
a file that is not UTF-8 fails at once with `file:line`; later lines are checked as they stream.
"""

from typing import Optional

import tensorflow as tf

from tfattn import kinds
from train import data_files, streams
from train.batching import Packing
from train.flag_choices import TEXT_BLOCKS, TEXT_LINES, TEXT_PACKINGS
from train.task import LANGUAGE_MODEL_DEFAULTS, Task
from train.tsv_tasks import HEAD_LINES, UNHELD_VALIDATION_LINES, workers_in_tf_config

FILE, LINE = "file", "line"  # --text_documents


def text_task(
  train_file: str,
  validation_file: Optional[str] = None,
  test_file: Optional[str] = None,
  packing: str = TEXT_BLOCKS,
  documents: str = FILE,
  seed: int = 0,
  num_workers: Optional[int] = None,
) -> Task:
  """The language model's task over text files; their heads are checked now. Without a
  validation file, validation reads the first training lines, which are not held out: the
  start says so.

  Args:
    train_file, validation_file, test_file: comma lists of paths or globs per data role.
    packing: `TEXT_BLOCKS`, `TEXT_DOCUMENTS` or `TEXT_LINES` (one example a line).
    documents: packed: FILE (a file is a document, its newlines are text) or LINE.
    seed: the training files' order is shuffled from it each epoch.
    num_workers: (default: TF_CONFIG's) must not exceed the training files.
  """
  if not train_file:
    raise data_files.needs_train_file("text")
  if packing not in TEXT_PACKINGS:
    raise ValueError(f"--text_packing must be one of {TEXT_PACKINGS}, got {packing!r}")
  if documents not in (FILE, LINE):
    raise ValueError(f"--text_documents must be one of {(FILE, LINE)}, got {documents!r}")
  per_line = packing == TEXT_LINES or documents == LINE
  roles = {
    flag: streams.expand(spec, flag, "text file")
    for flag, spec in (
      ("train_file", train_file),
      ("validation_file", validation_file),
      ("test_file", test_file),
    )
    if spec
  }
  for files in roles.values():
    for path in files:
      _check_head(path)
  train_files = roles["train_file"]
  streams.worker_files(train_files, num_workers or workers_in_tf_config(), 0, "train_file")

  def pieces(files, seed=None):
    return lambda: streams.text_pieces(files, per_line, seed)

  if validation_file:
    validation, note = pieces(roles["validation_file"]), ""
  else:
    validation = lambda: streams.text_pieces(train_files, per_line).take(  # noqa: E731
      UNHELD_VALIDATION_LINES
    )
    note = (
      f"validation reads the first {UNHELD_VALIDATION_LINES} training lines, which are not "
      "held out: pass --validation_file for an honest number"
    )

  def train_shard(num_workers: int, index: int):
    mine = streams.worker_files(train_files, num_workers, index, "train_file")
    return streams.text_pieces(mine, per_line, seed)

  shuffle_tokens = None
  if packing != TEXT_LINES:
    # A shuffle buffer larger than the corpus only takes longer to fill: tokens <= bytes.
    shuffle_tokens = max(sum(tf.io.gfile.stat(path).length for path in train_files), 1)
  return Task(
    "text",
    kinds.LANGUAGE_MODEL,
    pieces(train_files, seed),
    validation,
    pieces(roles["test_file"]) if test_file else None,
    defaults=dict(LANGUAGE_MODEL_DEFAULTS),
    validation_note=note,
    train_shard=train_shard,
    vocabulary_sample="reservoir",
    packing=Packing(text=packing, shuffle_tokens=shuffle_tokens),
  )


def _check_head(path):
  """The first `HEAD_LINES` lines of a text file are UTF-8 (a ValueError names the first bad
  `file:line`), and the file has text."""
  has_text = False
  with tf.io.gfile.GFile(path, "rb") as f:
    for number, raw in enumerate(f, 1):
      if number > HEAD_LINES and has_text:
        return
      try:
        line = streams.decode_line(raw)
      except ValueError as error:
        raise ValueError(f"{path}:{number}: {error}") from None
      has_text = has_text or bool(line.strip())
  if not has_text:
    raise ValueError(f"{path}: no text")
