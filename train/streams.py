"""Training files streamed by tf.data: TSV lines (`TextLineDataset`) or TFRecord files of
`tf.train.Example`s (`TFRecordDataset`), never held whole in memory.

A file argument is a comma list of paths or globs (`data/train-*.tsv,extra.tsv`). Files are read
`CYCLE_FILES` at a time, interleaved in blocks of `CHECK_BATCH` lines, in an order shuffled from
the run's seed each epoch, and shared out across workers by file. Every TSV line is checked
inside the pipeline, in batches: valid UTF-8, two tab-separated fields (one, the whole line, for
a language model's text), a target the task kind accepts. A bad line names its `file:line`;
`--bad_lines=fail` stops there, `--bad_lines=skip` drops it and counts it on stderr.
Blank lines are skipped silently, as before.
"""

import re
import sys
from typing import List, Optional, Sequence, Tuple

import tensorflow as tf

from train import data_files

FAIL, SKIP = "fail", "skip"
BAD_LINE_POLICIES = (FAIL, SKIP)
TFRECORD_SUFFIXES = (".tfrecord", ".tfrecords", ".tfrec")
# Lines checked per pipeline batch (the checks are vectorised over a batch); files interleave
# by such batches (interleaving line by line costs twice the reading and checking).
CHECK_BATCH = 1024
# Files read at once.
CYCLE_FILES = 8
# Skipped lines printed one by one; after that, one line every SKIP_REPORT_EVERY.
SKIPS_PRINTED, SKIP_REPORT_EVERY = 100, 10_000
_FAIL_HINT = " (--bad_lines=skip skips such lines)"
_NOT_UTF8_TEXT = "not valid UTF-8 text; save the file as UTF-8"
_OK, _BLANK, _NOT_UTF8, _FIELDS, _TARGET = range(5)


def is_tfrecord(path: str) -> bool:
  name = path[:-3] if path.endswith(".gz") else path
  return name.endswith(TFRECORD_SUFFIXES)


def expand(spec: str, flag: str, what: str = "TSV file") -> List[str]:
  """A comma list of paths and globs -> the files, each glob's matches sorted, duplicates
  dropped; a ValueError naming the flag for a glob that matches nothing or a missing file
  (called `what`)."""
  files = []
  for part in data_files.spec_parts(spec):
    if data_files.is_glob(part):
      matches = sorted(tf.io.gfile.glob(part))
      if not matches:
        raise data_files.no_match(flag, part)
    else:
      matches = [part]
    for path in matches:
      if not tf.io.gfile.exists(path) or tf.io.gfile.isdir(path):
        raise data_files.missing_file(what, path)
      if path not in files:
        files.append(path)
  if not files:
    raise ValueError(f"--{flag} names no file")
  if len({is_tfrecord(f) for f in files}) > 1:
    raise ValueError(f"--{flag} mixes TSV and TFRecord files: give one format per role")
  return files


def is_utf8(lines: tf.Tensor) -> tf.Tensor:
  """string `[n]` -> bool `[n]`: which are valid UTF-8. RE2 matches UTF-8 text, and its `.`
  matches no invalid byte (4x faster than transcoding)."""
  return tf.strings.regex_full_match(lines, "(?s:.)*")


def _codes(lines, target_ok, columns=2):
  """`[n]` lines -> (int32 `[n]` check codes, `[n, 2]` fields, int32 `[n]` field counts). A
  kind of one column reads the whole line as its first field and "" as its target."""
  # (TextLineDataset already drops a line's "\n" or "\r\n".)
  if columns == 1:
    pairs = tf.stack([lines, tf.zeros_like(lines)], axis=1)  # [n, 2]
    counts = tf.ones_like(lines, tf.int32)
  else:
    fields = tf.strings.split(lines, "\t")  # ragged [n, (fields)]
    counts = tf.cast(fields.row_lengths(), tf.int32)
    pairs = fields.to_tensor(default_value="", shape=[None, 2])
  utf8 = is_utf8(lines)
  blank = tf.equal(tf.strings.strip(lines), "")
  codes = tf.where(
    blank,
    _BLANK,
    tf.where(
      ~utf8,
      _NOT_UTF8,
      tf.where(
        tf.not_equal(counts, columns), _FIELDS, tf.where(target_ok(pairs[:, 1]), _OK, _TARGET)
      ),
    ),
  )
  return codes, pairs, counts


def _messages(path, numbers, codes, pairs, counts, target_rule):
  """`[n]` strings `file:line: why` (empty for good and blank lines)."""
  where = tf.strings.join([path, ":", tf.strings.as_string(numbers), ": "])
  reasons = tf.where(
    tf.equal(codes, _NOT_UTF8),
    "not valid UTF-8; save the file as UTF-8",
    tf.where(
      tf.equal(codes, _FIELDS),
      tf.strings.join(["expected 2 tab-separated fields, got ", tf.strings.as_string(counts)]),
      tf.strings.join([f"{target_rule}, got '", pairs[:, 1], "'"]),
    ),
  )
  return tf.strings.join([where, reasons])


class LineChecker:
  """Checks TSV lines inside a tf.data pipeline and keeps the good ones' two fields.

  Args:
    kind: the training kind object (`train/kinds.py`): reads the second column in-graph.
    bad_lines: FAIL or SKIP.
  """

  def __init__(self, kind, bad_lines: str = FAIL, num_classes: Optional[int] = None):
    if bad_lines not in BAD_LINE_POLICIES:
      raise ValueError(f"--bad_lines must be one of {BAD_LINE_POLICIES}, got {bad_lines!r}")
    self.kind, self.bad_lines, self.num_classes = kind, bad_lines, num_classes
    # Counts the lines skipped by this process (not restored on resume). Made with the first
    # pipeline: TensorFlow must not start before a multi-worker strategy is built.
    self.skipped = None

  def ready(self) -> "LineChecker":
    """Creates the skip counter (eagerly, outside any dataset function)."""
    if self.skipped is None:
      self.skipped = tf.Variable(0, dtype=tf.int64, trainable=False, name="skipped_lines")
    return self

  def __call__(self, path, numbers, lines):
    """(path, int64 `[n]` line numbers, `[n]` lines) -> (`[m]` sources, `[m]` targets)."""
    codes, pairs, counts = _codes(lines, self.kind.tsv_target_ok, self.kind.tsv_columns)
    rule = self.kind.tsv_target_rule
    if self.num_classes is not None:  # a label the model has no class for
      labels = self.kind.tsv_target(tf.where(tf.equal(codes, _OK), pairs[:, 1], "0"))
      codes = tf.where(
        tf.logical_and(tf.equal(codes, _OK), labels >= self.num_classes), _TARGET, codes
      )
      rule = (
        f"{rule} and below {self.num_classes}, the classes counted in the first lines of the "
        "training files and in the validation and test files (put an example of every class there)"
      )
    bad = codes > _BLANK
    # Messages for the bad lines only (the common batch has none).
    messages = _messages(
      path, *(tf.boolean_mask(t, bad) for t in (numbers, codes, pairs, counts)), rule
    )
    if self.bad_lines == FAIL:
      first = messages[:1]
      check = tf.debugging.Assert(
        ~tf.reduce_any(bad), [tf.strings.join([first, _FAIL_HINT])], summarize=1
      )
      with tf.control_dependencies([check]):
        codes = tf.identity(codes)
    else:
      codes = self._report_skips(messages, codes)
    good = tf.equal(codes, _OK)
    return tf.boolean_mask(pairs[:, 0], good), self.kind.tsv_target(
      tf.boolean_mask(pairs[:, 1], good)
    )

  def _report_skips(self, messages, codes):
    def report(message):
      count = self.skipped.assign_add(1)
      printed = tf.logical_or(count <= SKIPS_PRINTED, tf.equal(count % SKIP_REPORT_EVERY, 0))
      return tf.cond(
        printed,
        lambda: _print_skip(message, count),
        lambda: tf.constant(0, tf.int64),
      )

    done = tf.map_fn(report, messages, fn_output_signature=tf.int64)
    with tf.control_dependencies([done]):
      return tf.identity(codes)


def _print_skip(message, count):
  printed = tf.print(
    tf.strings.join(["skipped bad line ", message, " (", tf.strings.as_string(count), " so far)"]),
    output_stream=sys.stderr,
  )
  with tf.control_dependencies([printed]):
    return tf.constant(0, tf.int64)


def bad_line_message(error: Exception) -> Optional[str]:
  """The `file:line: why` of a bad line a FAIL pipeline stopped at, or None for other errors."""
  ends = "|".join(re.escape(end) for end in (_FAIL_HINT, _NOT_UTF8_TEXT))
  found = re.search(rf"assertion failed: \[(.*?)({ends})", str(error), re.S)
  if not found:
    return None
  # The assertion escapes quotes and backslashes in its text: undo that.
  return re.sub(r"\\(['\"\\])", r"\1", found.group(1)) + found.group(2)


def run_stream(compute):
  """Runs `compute()` (a pass over a streamed dataset); a bad line it meets under FAIL becomes a
  ValueError naming `file:line`, so the program says it in one line."""
  try:
    return compute()
  except tf.errors.InvalidArgumentError as error:
    message = bad_line_message(error)
    if message is None:
      raise
    raise ValueError(message) from None


def _tsv_file(path, checker):
  """One TSV file -> batches of its checked (source, target) pairs."""
  numbered = tf.data.TextLineDataset(path).enumerate(start=1)
  return numbered.batch(CHECK_BATCH).map(lambda numbers, lines: checker(path, numbers, lines))


def _tfrecord_file(path, kind, compression):
  """One TFRecord file of tf.train.Examples -> batches of the kind's pairs: its
  `example_features` ((source, target), (text, label)); a kind with one feature (a language
  model's text) pairs it with "" as the TSV reader does."""
  columns = kind.example_features
  spec = {name: tf.io.FixedLenFeature([], tf.as_dtype(dtype)) for name, dtype in columns}
  records = tf.data.TFRecordDataset(path, compression_type=compression)

  def pair(example):
    values = tuple(example[name] for name, _ in columns)
    return values if len(values) == 2 else (values[0], tf.zeros_like(values[0]))

  return (
    records.batch(CHECK_BATCH)
    .map(lambda serialized: tf.io.parse_example(serialized, spec))
    .map(pair)
  )


def examples(
  files: Sequence[str],
  kind,
  bad_lines: str = FAIL,
  seed: Optional[int] = None,
  checker: Optional[LineChecker] = None,
) -> tf.data.Dataset:
  """The (source, target) or (text, label) pairs of `files`, streamed.

  Args:
    files: the files (`expand`'s result), all TSV or all TFRecord.
    kind: the training kind object.
    bad_lines: FAIL or SKIP (TSV only).
    seed: shuffle the file order from this seed each epoch; None: read the files in order.
    checker: a LineChecker to reuse (its skip count), else a new one.
  """
  files = list(files)
  names = tf.data.Dataset.from_tensor_slices(files)
  if seed is not None:
    names = names.shuffle(len(files), seed=seed, reshuffle_each_iteration=True)
  if is_tfrecord(files[0]):
    compression = "GZIP" if files[0].endswith(".gz") else ""
    read = lambda path: _tfrecord_file(path, kind, compression)  # noqa: E731
  else:
    checker = (checker or LineChecker(kind, bad_lines)).ready()
    read = lambda path: _tsv_file(path, checker)  # noqa: E731
  return names.interleave(
    read,
    cycle_length=min(len(files), CYCLE_FILES),
    block_length=1,
    num_parallel_calls=tf.data.AUTOTUNE,
    deterministic=True,
  ).unbatch()


def _checked_text(path, numbers, lines):
  """`[n]` lines of a text file (int64 `[n]` numbers) -> the same lines, once an assertion has
  found them valid UTF-8 (else it names the first bad line: `bad_line_message`)."""
  utf8 = is_utf8(lines)
  first_bad = tf.boolean_mask(numbers, ~utf8)[:1]
  message = tf.strings.join([path, ":", tf.strings.as_string(first_bad), ": ", _NOT_UTF8_TEXT])
  check = tf.debugging.Assert(tf.reduce_all(utf8), [message], summarize=1)
  with tf.control_dependencies([check]):
    return tf.identity(lines)


def text_pieces(files: Sequence[str], document_per_line: bool, seed: Optional[int] = None):
  """The text of plain UTF-8 files as (text, ends_document) pairs, streamed, a file at a time
  (its lines in order), each line checked (a bad byte stops the pass naming `file:line`).

  Args:
    files: the files (`expand`'s result).
    document_per_line: each non-blank line is one document (ends_document True; blank lines
      skipped); False: each file is one document whose newlines are text. Its lines come
      with the newline before them ("\\n" + line; the first line without, a last "\\n" ends
      the document): SentencePiece's trainer strips the whitespace a sentence ends with, but
      learns a leading newline, so the vocabulary has a piece for it.
    seed: shuffle the file order from this seed each epoch; None: in order.
  """
  names = tf.data.Dataset.from_tensor_slices(list(files))
  if seed is not None:
    names = names.shuffle(len(files), seed=seed, reshuffle_each_iteration=True)

  def read(path):
    lines = (
      tf.data.TextLineDataset(path)
      .enumerate(start=1)
      .batch(CHECK_BATCH)
      .map(lambda numbers, lines: (numbers, _checked_text(path, numbers, lines)))
    )
    if document_per_line:
      kept = lines.map(
        lambda _, lines: tf.boolean_mask(lines, tf.not_equal(tf.strings.strip(lines), ""))
      )
      return kept.map(lambda lines: (lines, tf.ones_like(lines, tf.bool))).unbatch()
    newline_first = lines.map(
      lambda numbers, lines: (
        tf.where(numbers > 1, tf.strings.join(["\n", lines]), lines),
        tf.zeros_like(lines, tf.bool),
      )
    )
    ending = tf.data.Dataset.from_tensors((tf.constant("\n"), tf.constant(True)))
    return newline_first.unbatch().concatenate(ending)

  return names.flat_map(read)  # a file at a time: a document's lines stay together


def worker_files(files: Sequence[str], num_workers: int, index: int, flag: str) -> List[str]:
  """Worker `index`'s share of `files` (every num_workers-th file, as tf.data's FILE
  auto-sharding); a ValueError in one line when there are fewer files than workers."""
  if len(files) < num_workers:
    raise ValueError(
      f"--{flag} has {len(files)} file(s) for {num_workers} workers: each worker reads "
      f"whole files, so split the data into at least {num_workers} shards "
      f"(e.g. `split -n l/{num_workers} FILE part-`) and pass them as a glob"
    )
  return list(files)[index::num_workers]


def head(files: Sequence[str], kind, bad_lines: str, lines: int) -> List[Tuple]:
  """The first `lines` pairs of each file, checked in Python with the kind's own messages
  (`kind.parse_target`): a wrong file fails before anything is written, with `file:line`."""
  pairs = []
  for path in files:
    if is_tfrecord(path):
      try:
        for source, target in examples([path], kind).take(lines).as_numpy_iterator():
          # A text target comes back as bytes, a label as a number.
          text_target = isinstance(target, bytes)
          pairs.append((source.decode("utf-8"), target.decode("utf-8") if text_target else target))
      except tf.errors.OpError as error:
        raise ValueError(
          f"{path}: not TFRecords of tf.train.Example ({error.message.splitlines()[0]})"
        ) from None
      continue
    with tf.io.gfile.GFile(path, "rb") as f:
      for number, raw in enumerate(f, 1):
        if number > lines:
          break
        try:
          pair = parse_line(raw, kind)
        except ValueError as error:
          if bad_lines == FAIL:
            raise ValueError(f"{path}:{number}: {error}{_FAIL_HINT}") from None
          continue
        if pair is not None:
          pairs.append(pair)
  return pairs


def decode_line(raw: bytes) -> str:
  """A line of a file as read in binary -> its text without the line end; a ValueError saying
  where for bytes that are not UTF-8. The one decoder of training's text files."""
  try:
    return raw.decode("utf-8").rstrip("\n").rstrip("\r")
  except UnicodeDecodeError as error:
    raise ValueError(
      f"not valid UTF-8 ({error.reason} at byte {error.start} of the line); save the file as UTF-8"
    ) from None


def parse_line(raw: bytes, kind) -> Optional[Tuple]:
  """A TSV line -> (first field, the kind's target), None for a blank line; a ValueError
  saying why for a bad one. A kind of one column (`tsv_columns`): (the whole line, "")."""
  line = decode_line(raw)
  if not line.strip():
    return None
  if kind.tsv_columns == 1:
    return line, kind.parse_target("")
  fields = line.split("\t")
  if len(fields) != 2:
    raise ValueError(f"expected 2 tab-separated fields, got {len(fields)}")
  return fields[0], kind.parse_target(fields[1])
