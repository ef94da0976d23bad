"""`python -m serving.tools.beam_predict`: the whole-file job of `serving.tools.predict` as an
Apache Beam pipeline, for corpora one machine cannot finish in time.

  python -m serving.tools.beam_predict --model=models/mine --input='shards/*.de' --output=out.txt
  python -m serving.tools.beam_predict ... --beam_options='--direct_num_workers=2
      --direct_running_mode=multi_processing'                  # two worker processes here
  python -m serving.tools.beam_predict ... --beam_options='--runner=DataflowRunner --project=P
      --region=R --temp_location=gs://B/tmp --requirements_file=requirements.txt'

The pipeline: the input files -> their numbered lines (`batch_files.read_lines`, the reader of
`serving.tools.predict`) -> Reshuffle (spreads one file's lines over the workers) -> RunInference
with `ExportModelHandler` (our own: it loads the SavedModel with `tf.saved_model.load` after
`import tensorflow_text`, on each worker, and calls the signature through the same
`batch_model.BatchModel` as `serving.tools.predict`) -> each answer keyed by its line's chunk ->
GroupByKey -> one chunk file a key, its lines put back in input order -> after the pipeline, the
chunks joined into the output, in input order (`batch_files.join_chunks`). The output is the
single-process command's, line for line.

Runs here use Beam's in-process Python runner, FnApiRunner (the DirectRunner first tries to
download the Prism runner at run time). Other runners take Beam's own options in --beam_options.
"""

import cli

import dataclasses
import logging
import os
import shlex
import time
from typing import Optional

from absl import flags

from serving.tools import batch_files, batch_model
from settings import setting

LOCAL_RUNNER = "FnApiRunner"


@dataclasses.dataclass(frozen=True)
class BeamPredictFlags:
  """The flags of `python -m serving.tools.beam_predict`."""

  model: Optional[str] = setting(
    None, "Export base path (its newest version is used) or a version directory."
  )
  input: Optional[str] = setting(None, "Input: a file, a glob or a comma list of them.")
  output: Optional[str] = setting(None, "Output file; chunks are written to <output>.parts/ first.")
  signature_name: str = setting(
    "serving_default", "Signature to call: any that takes text (as predict)."
  )
  format: str = setting(
    batch_model.TEXT,
    "text or jsonl, as serving.tools.predict writes them.",
    choices=tuple(batch_model.OUTPUT_FORMATS),
  )
  column: int = setting(
    0, "0: the whole line is the text; N: the N-th TAB-separated field.", minimum=0
  )
  batch_size: int = setting(
    64, "Most lines per call of the signature (Beam's BatchElements).", minimum=1
  )
  chunk_lines: int = setting(
    2048, "Input lines a chunk file covers (the unit of the final join).", minimum=1
  )
  seed: int = setting(0, "With the sample signature: as serving.tools.predict's --seed.")
  bad_lines: str = setting(
    batch_files.FAIL,
    "As serving.tools.predict: fail = stop naming the line's file:line; skip = an empty line "
    "in its place.",
    choices=tuple(batch_files.BAD_LINE_POLICIES),
  )
  beam_options: str = setting(
    "",
    f"Beam pipeline options, one string (default runner here: {LOCAL_RUNNER}), e.g. "
    "'--direct_num_workers=2 --direct_running_mode=multi_processing' or "
    "'--runner=DataflowRunner --project=...'.",
  )


def define_flags():
  cli.define_flags(BeamPredictFlags)


class BadLineError(ValueError):
  """A bad line under --bad_lines=fail: its message is the one line the user sees."""


# The errors a pipeline stops with that the program says in one line (`stop_message`).
_TOLD_ERRORS = (BadLineError, batch_model.ModelError)


class _QuietBeam(logging.Filter):
  """On the log handlers: drops Beam's records below ERROR (its notes at import about apitools
  and the BigQuery client, its resource warning each bundle: several are logged on the root
  logger, so a level on Beam's loggers cannot stop them), and a worker's record of an error the
  program says in one line (Beam logs the failing bundle's traceback before it re-raises)."""

  def filter(self, record):
    if record.levelno < logging.ERROR and f"{os.sep}apache_beam{os.sep}" in record.pathname:
      return False
    error, chain = record.exc_info[1] if record.exc_info else None, []
    while error is not None and error not in chain:
      chain.append(error)
      error = error.__cause__ or error.__context__
    return not any(isinstance(link, _TOLD_ERRORS) for link in chain)


def quiet_beam_logs():
  """Installs `_QuietBeam` on the root logger's handlers (where Beam's records end) and sets
  Beam's own loggers to errors only. Call before importing apache_beam."""
  logging.getLogger("apache_beam").setLevel(logging.ERROR)
  for handler in logging.getLogger().handlers:
    if not any(isinstance(f, _QuietBeam) for f in handler.filters):
      handler.addFilter(_QuietBeam())


def handler_class():
  """`ExportModelHandler`, defined once Beam is imported (the program checks its flags first)."""
  from apache_beam.ml.inference.base import ModelHandler

  class ExportModelHandler(ModelHandler):
    """Beam's model handler for a tfattn export: `Line`s in, `(line, output, error)` out.

    Beam's stock TensorFlow handler needs tensorflow_hub and Keras' loader (which Keras 3
    refuses for a SavedModel); this one calls the signature directly.

    Args:
      export_dir: the export version directory (holding saved_model.pb).
      signature_name: the signature each batch of lines runs.
      output_format: how a row's outputs become the output line.
      seed: the sampling seed of the `sample` signatures.
      batch_size: the most lines Beam hands the model at once.
    """

    def __init__(self, export_dir, signature_name, output_format, seed, batch_size):
      super().__init__(max_batch_size=batch_size)
      self.export_dir, self.signature_name = export_dir, signature_name
      self.output_format, self.seed = output_format, seed

    def load_model(self):
      # On every worker: registers the SentencePiece ops before the graph is read (a worker
      # process started by Beam has not imported it).
      import tensorflow_text  # noqa: F401

      return batch_model.BatchModel(
        self.export_dir, self.signature_name, self.output_format, self.seed
      )

    def run_inference(self, batch, model, inference_args=None):
      del inference_args
      usable = [line for line in batch if line.text is not None]
      answers = {line[:2]: answer for answer in model.predict(usable) for line in answer[:1]}
      return [answers.get(line[:2], (line, None, line.error)) for line in batch]

    def get_metrics_namespace(self):
      return "tfattn"

  return ExportModelHandler


def numbered_lines(indexed_path, column):
  """(file index, path) -> its `Line`s, read through Beam's file systems (local or gs://...)."""
  from apache_beam.io.filesystems import FileSystems

  file_index, path = indexed_path
  with FileSystems.open(path, compression_type="uncompressed") as stream:
    yield from batch_files.read_lines(_split_lines(stream), path, file_index, column)


def _split_lines(stream):
  """A binary stream -> its lines with their newlines (Beam's streams are not line-iterable)."""
  pending = b""
  for block in iter(lambda: stream.read(1 << 20), b""):
    pending += block
    *lines, pending = pending.split(b"\n")
    for line in lines:
      yield line + b"\n"
  if pending:
    yield pending


def answer_line(answer, bad_lines, output_format, chunk_lines):
  """(line, output, error) -> ((file index, chunk index), (line number, output text)); a bad
  line fails the pipeline or leaves its mark."""
  line, output, error = answer
  if output is None:
    if bad_lines == batch_files.FAIL:
      raise BadLineError(f"{line.where}: {error} (--bad_lines=skip leaves an empty line)")
    output = batch_model.bad_line_output(line, error, output_format)
  return (line.file_index, (line.number - 1) // chunk_lines), (line.number, output)


def write_chunk(keyed, parts):
  """((file index, chunk index), [(line number, text)]) -> one chunk file, lines in order,
  written under a temporary name and renamed (a retried bundle rewrites the same file)."""
  from apache_beam.io.filesystems import FileSystems

  (file_index, chunk_index), numbered = keyed
  outputs = [text for _, text in sorted(numbered)]
  final = FileSystems.join(parts, batch_files.chunk_name(file_index, chunk_index))
  temp = f"{final}.tmp-{os.getpid()}-{time.monotonic_ns()}"
  with FileSystems.create(temp) as f:
    f.write(batch_files.chunk_bytes(outputs))
  FileSystems.rename([temp], [final])
  return final


def build_pipeline(
  pipeline, files, handler, *, column, bad_lines, output_format, chunk_lines, parts
):
  """The transforms, on `pipeline`; returns the PCollection of written chunk paths."""
  import apache_beam as beam
  from apache_beam.ml.inference.base import RunInference

  return (
    pipeline
    | "Files" >> beam.Create(list(enumerate(files)))
    | "ReadNumberedLines" >> beam.FlatMap(numbered_lines, column)
    | "Spread" >> beam.Reshuffle()
    | "RunInference" >> RunInference(handler)
    | "KeyByChunk" >> beam.Map(answer_line, bad_lines, output_format, chunk_lines)
    | "GroupChunks" >> beam.GroupByKey()
    | "WriteChunks" >> beam.Map(write_chunk, parts)
  )


def run(
  export_dir,
  files,
  output,
  *,
  signature_name="serving_default",
  output_format=batch_model.TEXT,
  column=0,
  batch_size=64,
  chunk_lines=2048,
  seed=0,
  bad_lines=batch_files.FAIL,
  beam_options=(),
):
  """Runs the pipeline and joins its chunks into `output`; returns the number of chunks."""
  import apache_beam as beam
  from apache_beam.io.filesystems import FileSystems
  from apache_beam.options.pipeline_options import PipelineOptions

  options = list(beam_options)
  if not any(option.startswith("--runner") for option in options):
    options.append(f"--runner={LOCAL_RUNNER}")
  parts = batch_files.parts_dir(output)
  if FileSystems.exists(FileSystems.join(parts, batch_files.SETTINGS_FILE)):
    raise ValueError(
      f"{parts} holds an interrupted serving.tools.predict run: resume it with "
      "serving.tools.predict --resume, or delete the folder"
    )
  if FileSystems.exists(parts):
    FileSystems.delete([parts])  # a failed earlier pipeline's chunks: Beam runs are redone whole
  FileSystems.mkdirs(parts)
  handler = handler_class()(export_dir, signature_name, output_format, seed, batch_size)
  with beam.Pipeline(options=PipelineOptions(options)) as pipeline:
    build_pipeline(
      pipeline,
      files,
      handler,
      column=column,
      bad_lines=bad_lines,
      output_format=output_format,
      chunk_lines=chunk_lines,
      parts=parts,
    )
  chunk_files = sorted(
    match.path for match in FileSystems.match([FileSystems.join(parts, "*.txt")])[0].metadata_list
  )
  if "://" in output:  # a cloud file system: an object appears whole when it is closed
    with FileSystems.create(output) as out:
      for path in chunk_files:
        with FileSystems.open(path) as chunk:
          out.write(chunk.read())
  else:
    batch_files.join_chunks(chunk_files, output, opener=lambda path, mode: FileSystems.open(path))
  FileSystems.delete([parts])
  return len(chunk_files)


def bad_line_message(error):
  """The message of the BadLineError (or the model's `batch_model.ModelError`) behind a
  pipeline failure, or None. A local runner raises it (possibly as the cause of its own
  error), other runners re-raise a worker's error as text after its class name; Beam appends
  the failing step ("[while running ...]"), dropped here."""
  chain, link = [], error
  while link is not None and link not in chain:
    chain.append(link)
    link = link.__cause__ or link.__context__
  ours = [link for link in chain if isinstance(link, _TOLD_ERRORS)]
  markers = [f"{told.__name__}: " for told in _TOLD_ERRORS if f"{told.__name__}: " in str(error)]
  if ours:
    text = str(ours[0])
  elif markers:
    text = str(error).split(markers[0], 1)[1].splitlines()[0]
  else:
    return None
  return text.split(" [while running")[0].strip().strip("'\"") or None


def main(argv):
  del argv  # cli.run refuses positional arguments
  f = flags.FLAGS
  if not f.model or not f.input or not f.output:
    raise cli.UsageError("--model, --input and --output are required")
  try:
    files = batch_files.expand_inputs(f.input)
    export_dir = batch_model.resolve_export(f.model)
  except ValueError as error:
    raise cli.UsageError(str(error)) from None
  if files == [batch_files.STDIN]:
    raise cli.UsageError("--input=- (stdin) is for serving.tools.predict; a pipeline reads files")
  if os.path.exists(os.path.join(batch_files.parts_dir(f.output), batch_files.SETTINGS_FILE)):
    raise cli.UsageError(
      f"{batch_files.parts_dir(f.output)} holds an interrupted serving.tools.predict run: "
      "resume it with serving.tools.predict --resume, or delete the folder"
    )
  beam_options = shlex.split(f.beam_options)
  quiet_beam_logs()
  cli.start_tensorflow_quietly()
  # The signature is checked here once, before the pipeline starts its workers.
  try:
    batch_model.BatchModel(export_dir, f.signature_name, f.format, f.seed)
  except ValueError as error:
    raise cli.UsageError(str(error)) from None
  start = time.monotonic()
  try:
    chunks = run(
      export_dir,
      files,
      f.output,
      signature_name=f.signature_name,
      output_format=f.format,
      column=f.column,
      batch_size=f.batch_size,
      chunk_lines=f.chunk_lines,
      seed=f.seed,
      bad_lines=f.bad_lines,
      beam_options=beam_options,
    )
  except Exception as error:  # Beam wraps a worker's error in its own
    message = bad_line_message(error)
    if message:
      raise cli.RunError(message) from None
    raise
  lines = sum(map(batch_files.count_lines, files))
  seconds = time.monotonic() - start
  print(
    f"{cli.program_name()}: {lines:,} lines in {chunks} chunk(s), {lines / seconds:,.1f} "
    f"lines/s (pipeline start included) -> {f.output}"
  )


if __name__ == "__main__":
  define_flags()
  cli.run(main)
