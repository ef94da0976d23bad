"""One export, one signature, called on batches of lines: the model side of whole-file
prediction (`python -m serving.tools.predict` and the Beam pipeline's model handler share it).

The export is loaded with `tf.saved_model.load` after `import tensorflow_text`, which registers
the SentencePiece ops its graph holds. Any signature whose inputs are `text` (and, for `sample`,
a `seed` per row) can be called: serving_default, translate_nbest, sample, the language model's
generate and generate_nbest, the classifier's serving_default. Each row's answer becomes one
output line: plain text (the translation, generation or label; every beam TAB-separated) or a
JSON object with every output of the signature (scores, log-probs, probabilities).

TensorFlow is imported when a `BatchModel` is made, so the programs check their flags first.
"""

import json
import os
from typing import Callable, Dict, List, Sequence, Tuple

from serving.tf_serving import versions
from serving.tools import batch_files

TEXT, JSONL = "text", "jsonl"
OUTPUT_FORMATS = (TEXT, JSONL)
# The output a plain-text line holds, first found (seq2seq, language model, classifier).
MAIN_OUTPUTS = ("translation", "generation", "label")
FLOAT_DIGITS = 6  # significant digits of scores and probabilities in JSON lines


def resolve_export(path: str) -> str:
  """A version directory as given, or a base path's newest version; a ValueError otherwise.
  Checked without TensorFlow."""
  if os.path.isfile(os.path.join(path, versions.SAVED_MODEL_FILE)):
    return path
  if not os.path.isdir(path):
    raise ValueError(f"--model={path} does not exist")
  found = versions.version_numbers(path)
  if not found:
    raise ValueError(
      f"--model={path} holds no SavedModel: give an export base path (with version folders "
      "like 1/) or a version directory"
    )
  return os.path.join(path, str(found[-1]))


def _json_value(value):
  """A numpy value of an output row -> JSON: text decoded, floats to FLOAT_DIGITS digits."""
  import numpy as np

  if isinstance(value, bytes):
    return value.decode("utf-8", "replace")
  if isinstance(value, np.ndarray):
    return [_json_value(item) for item in value]
  if isinstance(value, (np.floating, float)):
    return float(f"{float(value):.{FLOAT_DIGITS}g}")
  if isinstance(value, (np.integer, int)):
    return int(value)
  return value


class ModelError(Exception):
  """The export refused a batch whose lines it answers one by one: its answer depends on the
  batch, a defect of the model, not of any line (never hidden by retrying line by line)."""


class BatchModel:
  """A loaded export's signature, called on batches of `batch_files.Line`s.

  Args:
    export_dir: a version directory (see `resolve_export`).
    signature_name: the signature to call; its inputs must be `text` (and `seed`).
    output_format: TEXT or JSONL.
    seed: with a signature that takes seeds, line L gets `batch_files.seed_of(L, seed)`.
  """

  def __init__(self, export_dir: str, signature_name: str, output_format: str, seed: int = 0):
    import tensorflow as tf
    import tensorflow_text  # noqa: F401 - registers the SentencePiece ops of the export's graph

    if output_format not in OUTPUT_FORMATS:
      raise ValueError(f"--format must be one of {OUTPUT_FORMATS}, got {output_format!r}")
    self._tf = tf
    self.export_dir, self.signature_name = export_dir, signature_name
    self.output_format, self.seed = output_format, seed
    self._loaded = tf.saved_model.load(export_dir)  # kept: the signature needs its variables
    usable = sorted(
      name for name, function in self._loaded.signatures.items() if _takes_text(function)
    )
    if signature_name not in self._loaded.signatures:
      raise ValueError(
        f"{export_dir} has no signature {signature_name!r}; those that take text: "
        f"{', '.join(usable)}"
      )
    self._function = self._loaded.signatures[signature_name]
    # The export's own tokenizer (every tfattn export keeps it as `source_tokenizer`): a line's
    # length in tokens is what the model computes on; another SavedModel falls back to characters.
    self._tokenizer = getattr(self._loaded, "source_tokenizer", None)
    if signature_name not in usable:
      raise ValueError(
        f"signature {signature_name!r} does not take text lines (its inputs: "
        f"{', '.join(sorted(self._input_names()))}); those that do: {', '.join(usable)}"
      )
    self.takes_seed = "seed" in self._input_names()
    outputs = self._function.structured_outputs
    self.main_output = next((name for name in MAIN_OUTPUTS if name in outputs), None)
    if self.main_output is None:
      raise ValueError(
        f"signature {signature_name!r} has none of the outputs {MAIN_OUTPUTS} a line shows"
      )

  def _input_names(self):
    return set(self._function.structured_input_signature[1])

  def _call(self, lines: Sequence["batch_files.Line"]) -> Dict:
    tf = self._tf
    # surrogateescape: bytes a caller kept undecoded reach the export, which refuses them.
    texts = [line.text.encode("utf-8", "surrogateescape") for line in lines]
    inputs = {"text": tf.constant(texts, tf.string)}
    if self.takes_seed:
      inputs["seed"] = tf.constant(
        [batch_files.seed_of(line, self.seed) for line in lines], tf.int64
      )
    return {name: value.numpy() for name, value in self._function(**inputs).items()}

  def token_lengths(self, lines: Sequence["batch_files.Line"]) -> List[int]:
    """Each line's length in the export's tokens (what its encoder and decoding limits see),
    or in characters when the export has no tokenizer or refuses a text: the sort key of
    length-sorted batches."""
    tf = self._tf
    if self._tokenizer is None or not lines:
      return [len(line.text) for line in lines]
    texts = [line.text.encode("utf-8", "surrogateescape") for line in lines]
    try:
      pieces = self._tokenizer.tokenize(tf.constant(texts, tf.string))
    except tf.errors.InvalidArgumentError:  # such a line is named when its batch runs
      return [len(line.text) for line in lines]
    return [int(n) for n in pieces.row_lengths().numpy()]

  def predict(self, lines: Sequence["batch_files.Line"]) -> List[Tuple]:
    """[(line, output text or None, error)] in the order of `lines`. A batch the export refuses
    (InvalidArgument) is retried line by line, so only the refused lines get an error; when
    every line answers alone, the refusal was the model's: `ModelError`."""
    if not lines:
      return []
    try:
      outputs = self._call(lines)
    except self._tf.errors.InvalidArgumentError as error:
      reason = (error.message or str(error)).strip().splitlines()[0]
      if len(lines) == 1:
        return [(lines[0], None, f"refused by the export: {reason}")]
      answers = [result for line in lines for result in self.predict([line])]
      if all(output is not None for _, output, _ in answers):
        raise ModelError(
          f"{self.export_dir} refused a batch of {len(lines)} lines ({lines[0].where} to "
          f"{lines[-1].where}) that it answers one by one: its answers depend on the batch, "
          f"a defect of the model, not of a line: {reason}"
        ) from None
      return answers
    return [(line, self._format(outputs, row), "") for row, line in enumerate(lines)]

  def _format(self, outputs: Dict, row: int) -> str:
    if self.output_format == JSONL:
      record = {name: _json_value(value[row]) for name, value in sorted(outputs.items())}
      return json.dumps(record, ensure_ascii=False, sort_keys=True)
    value = _json_value(outputs[self.main_output][row])
    values = value if isinstance(value, list) else [value]  # every beam, best first
    return "\t".join(" ".join(str(item).split()) for item in values)  # one line, TABs between

  def main_text(self, output_line: str) -> str:
    """The best answer in an output line this model wrote (for scoring): the translation,
    generation or label; an n-best line's first beam."""
    if self.output_format == JSONL:
      value = json.loads(output_line).get(self.main_output, "")
      return str(value[0] if isinstance(value, list) else value)
    return output_line.split("\t", 1)[0]


def bad_line_output(line: "batch_files.Line", error: str, output_format: str) -> str:
  """What a skipped line leaves in the output, so output line N still answers input line N:
  an empty line, or a JSON object naming the problem."""
  if output_format == JSONL:
    return json.dumps({"error": f"{line.where}: {error}"}, ensure_ascii=False)
  return ""


def _takes_text(function) -> bool:
  names = set(function.structured_input_signature[1])
  return "text" in names and names <= {"text", "seed"}


def run_window(
  model: BatchModel,
  window: Sequence["batch_files.Line"],
  batch_size: int,
  sort: bool,
  on_batch: Callable[[int], None] = lambda lines: None,
) -> List[Tuple]:
  """[(line, output text or None, error)] for a window, in the window's order: bad input lines
  keep their reading error; the rest run in batches, sorted by their length in the export's
  tokens when `sort`. `on_batch(lines)` after each batch (progress)."""
  length = None
  if sort:
    usable = [line for line in window if line.text is not None]
    tokens = dict(zip((line[:2] for line in usable), model.token_lengths(usable)))
    length = lambda line: tokens[line[:2]]  # noqa: E731
  answers = {}
  for batch in batch_files.batches(window, batch_size, sort, length):
    for line, output, error in model.predict(batch):
      answers[line[:2]] = (line, output, error)
    on_batch(len(batch))
  return [answers.get(line[:2], (line, None, line.error)) for line in window]
