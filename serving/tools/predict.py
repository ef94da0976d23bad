r"""`python -m serving.tools.predict`: an export over a whole file, one output line per input line.

  python -m serving.tools.predict --model=models/mine --input=test.de --output=test.hyp \
      --reference=test.en                              # translate, then score with sacreBLEU
  python -m serving.tools.predict --model=models/mine --input=test.de --output=test.hyp --resume
  python -m serving.tools.predict --model=models/mine_cls --input=test.tsv --column=1 \
      --reference=test.tsv --reference_column=2        # classify; accuracy against the labels
  python -m serving.tools.predict --model=models/mine --signature_name=translate_nbest \
      --format=jsonl --input='shards/*.de' --output=nbest.jsonl

It reads a window of lines (`--window`), sorts the window by length in the export's own tokens
into batches (less padding, and decoding loops that end together), and writes the window's
answers in input order as one chunk file, atomically
(`serving/tools/batch_files.py`); at the end the chunks become the output file. Memory holds one
window, whatever the file's size. After Ctrl-C or a crash, the same command with `--resume`
skips the lines of the finished chunks. A line that is not UTF-8, lacks the `--column`, or is
refused by the export is named by its file:line and stops the run (`--bad_lines=fail`) or
leaves an empty line (a JSON `{"error": ...}`) in its place (`--bad_lines=skip`).

Flags, inputs and the export are checked before TensorFlow loads.
"""

import cli

import dataclasses
import os
import sys
import time
from typing import Optional

from absl import flags

from serving.tools import batch_files, batch_model
from settings import setting

_STARTED = time.monotonic()  # the program's start (this module loads first): rates count from it


@dataclasses.dataclass(frozen=True)
class PredictFlags:
  """The flags of `python -m serving.tools.predict`."""

  model: Optional[str] = setting(
    None, "Export base path (its newest version is used) or a version directory."
  )
  input: Optional[str] = setting(
    None, "Input: a file, a glob ('data/*.de') or a comma list of them, or - for stdin."
  )
  output: str = setting(
    "-", "Output file (- = stdout); written through <output>.parts/ chunk files."
  )
  signature_name: str = setting(
    "serving_default",
    "Signature to call: any that takes text, e.g. serving_default, translate_nbest, sample, "
    "generate, generate_nbest.",
  )
  format: str = setting(
    batch_model.TEXT,
    "text: the translation, generation or label (n-best: every beam, TAB-separated); "
    "jsonl: every output of the signature as a JSON object (scores, beams, probabilities).",
    choices=tuple(batch_model.OUTPUT_FORMATS),
  )
  column: int = setting(
    0, "0: the whole line is the text; N: the N-th TAB-separated field.", minimum=0
  )
  batch_size: int = setting(64, "Lines per call of the signature.", minimum=1)
  window: int = setting(
    2048, "Lines read, sorted by length into batches and written as one chunk at a time.", minimum=1
  )
  sort_by_length: bool = setting(
    True,
    "Sort each window by length (the export's tokens) into batches: less padding, and rows "
    "of a batch that stop decoding at about the same step.",
  )
  seed: int = setting(
    0,
    "With a signature that takes seeds (sample): line N of input file F gets seed "
    f"--seed + N + F * {batch_files.SEED_STRIDE_PER_FILE:,} (the same in any batch).",
  )
  bad_lines: str = setting(
    batch_files.FAIL,
    "A line that is not UTF-8, lacks --column or is refused by the export: fail = stop "
    "naming its file:line (finished chunks are kept); skip = an empty line (JSON: an error) "
    "in its place, counted.",
    choices=tuple(batch_files.BAD_LINE_POLICIES),
  )
  resume: bool = setting(
    False, "Continue an interrupted run: keep <output>.parts/ and skip its lines."
  )
  reference: Optional[str] = setting(
    None,
    "Score the output against this file (a line per input line): sacreBLEU BLEU (cased and "
    "lowercased) and chrF for text, accuracy for labels.",
  )
  reference_column: int = setting(
    0, "0: whole reference lines; N: their N-th TAB field.", minimum=0
  )
  progress_every: float = setting(
    10.0, "Seconds between progress lines on stderr (0: none).", minimum=0
  )


def define_flags():
  cli.define_flags(PredictFlags)


def run_settings(f, files, export_dir) -> dict:
  """What a run's chunks depend on: a `--resume` with other values would mix two runs."""
  return {
    "inputs": [os.path.abspath(path) for path in files],
    "model": os.path.abspath(export_dir),
    "signature_name": f.signature_name,
    "format": f.format,
    "column": f.column,
    "window": f.window,
    "seed": f.seed,
  }


class Progress:
  """A line on stderr every `every` seconds, counted batch by batch (a file shorter than a
  window shows progress too): lines done, lines/s since the program started (TensorFlow and the
  export's loading included), ETA from the rate since the export loaded.

  Args:
    total: the input's lines (None: stdin, unknown).
    every: seconds between lines (0: none).
    done: lines already in finished chunks (a resumed run).
    started: `time.monotonic()` when the program started.
  """

  def __init__(self, total, every, done=0, started=None):
    self.total, self.every, self.done = total, every, done
    self.start = self.last = time.monotonic()  # the export is loaded: predicting starts
    self.started = self.start if started is None else started
    self.new = 0  # lines predicted by this process (the rates' numerator)

  def add(self, lines):
    self.done += lines
    self.new += lines
    now = time.monotonic()
    if self.every and now - self.last >= self.every:
      self.last = now
      print(self.line(now), file=sys.stderr, flush=True)

  def rate(self, now=None, since_start=True):
    """Lines/s of this process: since the program started, or (False) since the export
    loaded."""
    elapsed = (now or time.monotonic()) - (self.started if since_start else self.start)
    return self.new / elapsed if elapsed > 0 else 0.0

  def line(self, now):
    text = f"{cli.program_name()}: {self.done:,}"
    if self.total:
      text += f" of {self.total:,} lines ({100 * self.done / self.total:.0f}%)"
    else:
      text += " lines"
    text += f", {self.rate(now):,.1f} lines/s"
    predicting = self.rate(now, since_start=False)
    if self.total and predicting > 0:
      text += f", ETA {_duration((self.total - self.done) / predicting)}"
    return text

  def summary(self, now) -> str:
    """The last line's rates: since the program started, and since the export loaded."""
    return (
      f"{self.rate(now):,.1f} lines/s in {now - self.started:,.1f} s ({self.rate(now, False):,.1f} "
      f"lines/s once TensorFlow and the export had loaded, in {self.start - self.started:,.1f} s)"
    )


def _duration(seconds):
  seconds = round(seconds)
  if seconds < 60:
    return f"{seconds} s"
  minutes, seconds = divmod(seconds, 60)
  if minutes < 60:
    return f"{minutes} min {seconds} s"
  return f"{minutes // 60} h {minutes % 60} min"


def check(f):
  """(input files, export dir, chunk folder or None): every check that needs no TensorFlow."""
  if not f.model:
    raise cli.UsageError("--model is required: an export base path or a version directory")
  if not f.input:
    raise cli.UsageError("--input is required: a file, a glob, a comma list, or - for stdin")
  try:
    files = batch_files.expand_inputs(f.input)
    export_dir = batch_model.resolve_export(f.model)
  except ValueError as error:
    raise cli.UsageError(str(error)) from None
  if f.reference and not os.path.isfile(f.reference):
    raise cli.UsageError(f"--reference {f.reference} does not exist")
  if f.output == batch_files.STDIN:
    if f.resume:
      raise cli.UsageError("--resume needs --output=FILE (stdout cannot be resumed)")
    return files, export_dir, None
  if os.path.isdir(f.output):
    raise cli.UsageError(f"--output {f.output} is a directory; give a file")
  if os.path.abspath(f.output) in {os.path.abspath(path) for path in files}:
    raise cli.UsageError(f"--output {f.output} is also an input")
  parent = os.path.dirname(os.path.abspath(f.output))
  if not os.path.isdir(parent):
    raise cli.UsageError(f"--output {f.output}: the folder {parent} does not exist")
  chunks = batch_files.ChunkDir(f.output)
  if f.resume and files == [batch_files.STDIN]:
    raise cli.UsageError("--resume needs --input files (stdin cannot be read again)")
  if chunks.exists():
    if not f.resume:
      raise cli.UsageError(
        f"{chunks.path} holds an interrupted run's chunks: add --resume to continue it, or "
        "delete the folder to start again"
      )
    before = chunks.settings()
    now = run_settings(f, files, export_dir)
    if before is not None and before != now:
      changed = sorted(key for key in now if before.get(key) != now.get(key))
      raise cli.UsageError(
        f"--resume with other settings than {chunks.path} was made with ({', '.join(changed)}): "
        "give the same flags, or delete the folder to start again"
      )
  return files, export_dir, chunks


def _bad_line_error(line, error, chunks) -> cli.RunError:
  """The one line of --bad_lines=fail; the chunk folder is kept only if it holds finished
  chunks (then --resume continues), else removed (the same command can run again)."""
  kept = chunks is not None and chunks.exists() and bool(chunks.chunk_files())
  if chunks is not None and chunks.exists() and not kept:
    chunks.remove()
  return cli.RunError(
    f"{line.where}: {error} (--bad_lines=skip leaves an empty line in its place"
    + ("; the finished chunks are kept: --resume continues)" if kept else ")")
  )


def _predict_files(f, files, model, chunks, progress, kept) -> int:
  """Runs every window of every input file (after the finished chunks), writing each window's
  answers as a chunk (or to stdout); returns how many bad lines were skipped."""
  skipped = 0
  for file_index, path in enumerate(files):
    first_chunk = chunks.done_chunks(file_index) if chunks is not None else 0
    with batch_files.open_input(path) as stream:
      lines = batch_files.read_lines(
        stream, path, file_index, f.column, start=first_chunk * f.window
      )
      for chunk_index, window in enumerate(batch_files.windows(lines, f.window), first_chunk):
        outputs = []
        answers = batch_model.run_window(
          model, window, f.batch_size, f.sort_by_length, on_batch=progress.add
        )
        progress.add(sum(line.text is None for line in window))  # unreadable: in no batch
        for line, output, error in answers:
          if output is None:
            if f.bad_lines == batch_files.FAIL:
              raise _bad_line_error(line, error, chunks)
            skipped += 1
            output = batch_model.bad_line_output(line, error, f.format)
          outputs.append(output)
        if chunks is None:
          sys.stdout.write("".join(text + "\n" for text in outputs))
          sys.stdout.flush()
          if kept is not None:
            kept.extend(outputs)
        else:
          chunks.write(file_index, chunk_index, outputs)
  return skipped


def _lines_in_chunks(chunks, files, window) -> int:
  """Input lines whose answers are in finished chunks (0 without a chunk folder)."""
  if chunks is None:
    return 0
  return sum(
    min(chunks.done_chunks(i) * window, batch_files.count_lines(path))
    for i, path in enumerate(files)
  )


def main(argv):
  del argv  # cli.run refuses positional arguments
  f = flags.FLAGS
  files, export_dir, chunks = check(f)
  cli.start_tensorflow_quietly()  # everything that can be checked without it is
  try:
    model = batch_model.BatchModel(export_dir, f.signature_name, f.format, f.seed)
  except ValueError as error:
    raise cli.UsageError(str(error)) from None
  if chunks is not None and not chunks.exists():
    chunks.start(run_settings(f, files, export_dir))
  total = None if files == [batch_files.STDIN] else sum(map(batch_files.count_lines, files))
  already = _lines_in_chunks(chunks, files, f.window)
  progress = Progress(total, f.progress_every, done=already, started=_STARTED)
  kept = [] if f.reference and chunks is None else None  # stdout: scored from memory
  try:
    skipped = _predict_files(f, files, model, chunks, progress, kept)
  except KeyboardInterrupt:
    if chunks is not None:
      print(
        f"{cli.program_name()}: {_lines_in_chunks(chunks, files, f.window):,} lines are in "
        "finished chunks; the same command with --resume continues",
        file=sys.stderr,
        flush=True,
      )
    raise
  except batch_model.ModelError as error:  # never hidden: the export, not a line, is wrong
    raise cli.RunError(str(error)) from None
  if chunks is not None:
    batch_files.join_chunks(chunks.chunk_files(), f.output)
    chunks.remove()
  done = time.monotonic()
  print(
    f"{cli.program_name()}: {progress.done:,} lines"
    + (f" ({progress.new:,} in this run)" if already else "")
    + f", {progress.summary(done)}, {skipped:,} bad line(s) skipped"
    + (" in this run" if already else "")
    + ("" if chunks is None else f" -> {f.output}"),
    file=sys.stderr,
    flush=True,
  )
  if f.reference:
    if kept is None:
      with open(f.output, encoding="utf-8") as out:
        kept = [line.rstrip("\n") for line in out]
    # On stdout unless the answers went there.
    print(
      score(model, kept, f.reference, f.reference_column),
      file=sys.stderr if chunks is None else sys.stdout,
    )


def score(model, output_lines, reference_path, reference_column=0) -> str:
  """One line: accuracy for labels, else sacreBLEU's BLEU (cased, lowercased) and chrF with
  their signatures. Output and reference must have as many lines."""
  with open(reference_path, encoding="utf-8") as f:
    references = [line.rstrip("\n").rstrip("\r") for line in f]
  if reference_column:
    try:
      references = [line.split("\t")[reference_column - 1] for line in references]
    except IndexError:
      raise cli.RunError(
        f"--reference {reference_path}: a line has fewer than {reference_column} TAB fields"
      ) from None
  if len(references) != len(output_lines):
    raise cli.RunError(
      f"--reference {reference_path} has {len(references):,} lines for "
      f"{len(output_lines):,} output lines"
    )
  hypotheses = [model.main_text(line) for line in output_lines]
  if model.main_output == "label":
    right = sum(h.strip() == r.strip() for h, r in zip(hypotheses, references))
    return f"accuracy {right / max(1, len(references)):.4f} ({right:,} of {len(references):,})"
  import sacrebleu

  cased = sacrebleu.metrics.BLEU()
  lowercased = sacrebleu.metrics.BLEU(lowercase=True)
  chrf = sacrebleu.metrics.CHRF()
  results = []
  for metric in (cased, lowercased, chrf):
    result = metric.corpus_score(hypotheses, [references])
    results.append(f"{result.score:.2f} {metric.get_signature()}")
  return f"BLEU {results[0]} | lowercased BLEU {results[1]} | chrF {results[2]}"


if __name__ == "__main__":
  define_flags()
  cli.run(main)
