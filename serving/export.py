"""`python -m serving.export`: a trained run -> TF Serving's `<base>/<version>/` layout.

The version is written to a hidden temporary directory and renamed into place, so a server
polling the base path never sees a partial version; an existing version is never overwritten.

TensorFlow is imported inside the functions that build and save the export: the program checks
its flags, the run directory and the base path first, so a mistake is told at once.
"""

import cli

import json
import os
import shutil
from typing import (
  TYPE_CHECKING,
  Dict,
  List,
  Mapping,
  NamedTuple,
  Optional,
  Protocol,
  Sequence,
  Tuple,
  runtime_checkable,
)

from serving import versions, xla_compilation
from tfattn import kinds
from tfattn.config import TransformerConfig
from tfattn.decode_options import DECODE_MODES, DecodeOptions
from tfattn.run_dir import RunDir

if TYPE_CHECKING:
  import tensorflow as tf

# What the export writes beside the SavedModel: the settings it was made with.
EXPORT_INFO_FILE = os.path.join(versions.ASSETS_EXTRA, "tfattn.json")


@runtime_checkable
class ExportKind(kinds.ModelKind, Protocol):
  """What the export needs of a task kind: `tfattn.kinds`' model and vocabularies (ModelKind),
  plus the exported module. Every entry of `EXPORT_KINDS` satisfies it (tested)."""

  def export_module(
    self,
    model: "tf.Module",
    tokenizers: Mapping[str, "tf.Module"],
    task_info: Mapping,
    options: DecodeOptions,
    decode_mode: str,
  ) -> "tf.Module":
    """The module to save (`serving.modules`): its `signatures()`, `warmup_requests(texts,
    compiled_only)`, and, when it decodes, `decode_mode` ("graph" or "xla"; None when it
    does not decode), `length_buckets` and the `options` it decodes with.

    Args:
      model: the trained model.
      tokenizers: {side: in-graph tokenizer} for each of `vocabulary_sides`.
      task_info: the run's `task.json`.
      options: how to decode (kinds that do not decode ignore them).
      decode_mode: "graph" or "xla" (resolved; kinds that do not decode ignore it).
    """


class _Seq2SeqExportKind(kinds.Seq2SeqModel):
  def export_module(self, model, tokenizers, task_info, options, decode_mode):
    from serving.modules import Seq2SeqExport

    del task_info  # nothing beyond the model config
    return Seq2SeqExport(
      model, tokenizers["source"], tokenizers["target"], options, decode=decode_mode
    )


class _ClassifierExportKind(kinds.ClassifierModel):
  def export_module(self, model, tokenizers, task_info, options, decode_mode):
    from serving.modules import ClassifierExport

    del options, decode_mode  # one forward pass: nothing to decode
    return ClassifierExport(
      model, tokenizers["source"], truncate=task_info.get("truncate", "right")
    )


class _LanguageModelExportKind(kinds.LanguageModelKind):
  def export_module(self, model, tokenizers, task_info, options, decode_mode):
    from serving.modules import LanguageModelExport

    del task_info  # nothing beyond the model config
    return LanguageModelExport(model, tokenizers["source"], options, decode=decode_mode)


EXPORT_KINDS: Dict[str, ExportKind] = {
  kind.name: kind
  for kind in (_Seq2SeqExportKind(), _ClassifierExportKind(), _LanguageModelExportKind())
}


def run_decode_options(run_dir: str) -> DecodeOptions:
  """The DecodeOptions the run evaluated with (`DecodeOptions.of_run` of its run_config.json,
  read as JSON: serving does not import the training program). A directory without that file
  (made by hand) gets `of_run({})`: what a run evaluated with before DecodeOptions existed."""
  path = RunDir(run_dir).run_config
  values = {}
  if os.path.exists(path):
    with open(path) as f:
      values = json.load(f)
  return DecodeOptions.of_run(values)


def final_weights(run_dir: str) -> Optional[list]:
  """The checkpoint prefixes of the weights the run's final evaluation judged (eval.json's
  "weights": the last, the averaged or the best-on-validation checkpoints; runs finished before
  it existed wrote "averaged_checkpoints" when they averaged), or None for a run that has not
  finished (or judged its latest checkpoint before eval.json named it)."""
  layout = RunDir(run_dir)
  if not os.path.exists(layout.eval_metrics):
    return None
  with open(layout.eval_metrics) as f:
    metrics = json.load(f)
  names = (metrics.get("weights") or {}).get("checkpoints") or metrics.get("averaged_checkpoints")
  if not names:
    return None
  return [os.path.join(layout.checkpoints, name) for name in names]


class TrainedRun(NamedTuple):
  """A training run's model, restored.

  Attributes:
    task_info: the run's task.json ({"name", "kind", "num_classes", "truncate"}).
    model: the rebuilt model with the chosen weights.
    tokenizers: {side: in-graph tokenizer}.
    checkpoints: the checkpoint prefixes whose (mean) weights the model holds.
  """

  task_info: Dict
  model: "tf.Module"
  tokenizers: Dict
  checkpoints: List[str]


def _check_run_dir(run_dir: str) -> RunDir:
  """The run directory's layout; a ValueError if it is not a training run directory."""
  layout = RunDir(run_dir)
  for required in (layout.task, layout.model_config):
    if not os.path.exists(required):
      raise ValueError(
        f"{run_dir} is not a training run directory (missing {os.path.basename(required)})"
      )
  return layout


def check_destination(
  run_dir: str, base_path: str, version: Optional[int] = None
) -> Tuple[int, str]:
  """(version, its folder) for a new export of `run_dir` under `base_path`, checked without
  TensorFlow: a ValueError if the run directory is not one, the base path is a file or the
  version exists (versions are never overwritten)."""
  if os.path.exists(base_path) and not os.path.isdir(base_path):
    raise ValueError(f"--base_path={base_path} is a file; pass a directory")
  _check_run_dir(run_dir)
  version = versions.next_version(base_path) if version is None else int(version)
  if version <= 0:
    raise ValueError(f"--version must be a positive integer, got {version}")
  final = os.path.join(base_path, str(version))
  if os.path.exists(final):
    raise ValueError(f"{final} already exists; versions are never overwritten")
  return version, final


def load_trained(
  run_dir: str, checkpoint: Optional[str] = None, average_last: Optional[int] = None
) -> TrainedRun:
  """Rebuilds the model of a run directory and restores the weights its final evaluation
  judged (or the latest checkpoint of an unfinished run), or the given checkpoint, or the
  average of the last `average_last` checkpoints."""
  from tfattn import text
  from tfattn.checkpoints import checkpoints_to_average, restore_average

  layout = _check_run_dir(run_dir)
  with open(layout.task) as f:
    task_info = json.load(f)
  with open(layout.model_config) as f:
    model_config = TransformerConfig.from_json(f.read())
  kind = kinds.lookup(task_info["kind"], EXPORT_KINDS)
  model = kind.build_model(model_config)
  chosen = None if checkpoint or average_last else final_weights(run_dir)
  if chosen is None:
    chosen = checkpoints_to_average(layout.checkpoints, checkpoint, average_last or 1)
  restore_average(model, chosen)
  tokenizers = {
    side: text.load_tokenizer(text.tokenizer_path(layout.vocab, side))
    for side in kind.vocabulary_sides
  }
  return TrainedRun(task_info, model, tokenizers, chosen)


def bucket_warmup_texts(tokenizer, buckets):
  """One text per source length bucket whose token count (after truncation to the last bucket,
  max_length) falls in that bucket, so replaying them compiles every XLA program a request can
  need at that batch size. Texts repeat one vocabulary word; the repeat count comes from the
  measured tokens of 1 and 2 repeats, and the resulting counts are checked."""
  import tensorflow as tf

  from tfattn import text

  reserved = len(text.RESERVED_TOKENS)
  lower_bounds = (0, *tuple(buckets[:-1]))

  def count(texts):
    return tokenizer.tokenize(tf.constant(texts)).row_lengths().numpy()

  for piece in range(reserved, min(tokenizer.vocab_size, reserved + 200)):
    word = tokenizer.detokenize(tf.constant([[piece]]))[0].numpy().decode().strip()
    if not word:
      continue
    for joiner in (" ", ""):
      one, two = count([word, joiner.join([word] * 2)])
      per_repeat, base = two - one, 2 * one - two  # tokens = base + per_repeat * repeats
      if per_repeat < 1:
        continue
      texts = [joiner.join([word] * max(1, (bucket - base) // per_repeat)) for bucket in buckets]
      if all(
        low < min(length, buckets[-1]) <= high
        for low, length, high in zip(lower_bounds, count(texts), buckets)
      ):
        return texts
  raise ValueError(
    "found no vocabulary word whose repetitions fill every source length bucket "
    f"{buckets}; export with --decode=graph"
  )


def check_decode(decode):
  """The decoding mode, "graph" or "xla"; a ValueError names any other. There is no automatic
  choice: "graph" is the export every stock TF Serving image (CPU and GPU, 2.12-2.19) loads with
  no flag; "xla" needs a server flag (xla_compilation.TF_SERVING_NEEDS)."""
  if decode not in DECODE_MODES:
    raise ValueError(f"--decode must be graph or xla, got {decode!r}")
  return decode


def is_xla_export(base_path: str) -> bool:
  """Whether the newest version under base_path is an XLA export of ours (its export info says
  decode "xla"): TF Serving, and serving.server, then need an XLA flag."""
  found = versions.version_numbers(base_path) if os.path.isdir(base_path) else []
  info = os.path.join(base_path, str(max(found)), EXPORT_INFO_FILE) if found else ""
  if not os.path.exists(info):
    return False
  with open(info) as f:
    return json.load(f).get("decode") == "xla"


def export(
  run_dir: str,
  base_path: str,
  *,
  options: Optional[DecodeOptions] = None,
  version: Optional[int] = None,
  checkpoint: Optional[str] = None,
  model_name: str = "tfattn",
  warmup_texts: Optional[Sequence[str]] = None,
  average_last: Optional[int] = None,
  decode: str = "graph",
  warmup_batch_sizes: Sequence[int] = (1,),
) -> str:
  """Exports the run's model as `<base_path>/<version>`; returns that directory.

  Args:
    run_dir: the training run directory (`tfattn/run_dir.py`).
    base_path: TF Serving's model base path; created if missing.
    options: how the signatures decode; default: the run's own (`run_decode_options`), so the
      export serves what the run evaluated.
    version: the version number; default one above the highest version folder.
    checkpoint: a checkpoint prefix to export instead of the latest.
    model_name: the model name written into the warm-up requests.
    warmup_texts: texts of the first warm-up requests (default: a few vocabulary pieces and "").
    average_last: export the mean of the last N kept checkpoints (default: the weights the
      run's final evaluation judged).
    decode: "graph" (loads on every TF Serving image with no flag) or "xla" (the searches
      compiled with XLA: TF Serving then needs a flag, see `check_decode`); with "xla" the
      warm-up records hold one request per source length bucket, batch size in
      `warmup_batch_sizes` and compiled search (serving_default's, and translate_nbest's where
      it is another).
    warmup_batch_sizes: batch sizes the XLA warm-up compiles.
  """
  import tensorflow as tf

  from serving import warmup

  version, final = check_destination(run_dir, base_path, version)
  decode = check_decode(decode)
  if not warmup_batch_sizes or min(warmup_batch_sizes) < 1:
    raise ValueError(f"--warmup_batch_sizes must be positive integers, got {warmup_batch_sizes}")
  if options is None:
    options = run_decode_options(run_dir)
  task, model, tokenizers, averaged = load_trained(run_dir, checkpoint, average_last)
  module = EXPORT_KINDS[task["kind"]].export_module(model, tokenizers, task, options, decode)
  warmup_requests = _warmup_requests(module, tokenizers["source"], warmup_texts, warmup_batch_sizes)
  created_base = not os.path.exists(base_path)
  os.makedirs(base_path, exist_ok=True)
  temp = os.path.join(base_path, f".tmp-export-{version}-{os.getpid()}")
  shutil.rmtree(temp, ignore_errors=True)
  try:
    signatures = module.signatures()
    tf.saved_model.save(module, temp, signatures=signatures)
    os.makedirs(os.path.join(temp, versions.ASSETS_EXTRA), exist_ok=True)
    warmup.write_warmup_file(os.path.join(temp, warmup.WARMUP_FILE), model_name, warmup_requests)
    decodes = module.decode_mode is not None
    with open(os.path.join(temp, EXPORT_INFO_FILE), "w") as f:
      json.dump(
        {
          "task": task,
          "model_config": json.loads(model.config.to_json()),
          "decode_options": module.options.to_dict() if decodes else None,
          "decode": module.decode_mode,
          "length_buckets": list(module.length_buckets) if module.length_buckets else None,
          "signatures": sorted(signatures),
          "checkpoints": [os.path.basename(p) for p in averaged],
        },
        f,
        indent=2,
      )
    os.rename(temp, final)  # atomic on one file system
  except BaseException:
    shutil.rmtree(temp, ignore_errors=True)
    if created_base and not os.listdir(base_path):
      os.rmdir(base_path)  # leave nothing behind a failed first export
    raise
  return final


def _warmup_requests(module, source_tokenizer, texts, batch_sizes):
  """A first request for every text signature; with XLA, one per length bucket, batch size and
  compiled search, so no live request pays a compilation."""
  import tensorflow as tf

  from tfattn import text

  if texts is None:  # a few vocabulary pieces as text, and the empty string
    first_pieces = tf.range(len(text.RESERVED_TOKENS), min(source_tokenizer.vocab_size, 12))
    texts = [source_tokenizer.detokenize(first_pieces[tf.newaxis])[0].numpy().decode(), ""]
  requests = module.warmup_requests(texts)
  if module.decode_mode == "xla":
    bucket_texts = bucket_warmup_texts(source_tokenizer, module.length_buckets)
    requests += [
      request
      for size in sorted(set(batch_sizes))
      for one in bucket_texts
      for request in module.warmup_requests([one] * size, compiled_only=True)
    ]
  return requests


def _define_flags():
  from absl import flags

  flags.DEFINE_string("run_dir", None, "Training run directory (uses its latest checkpoint).")
  flags.DEFINE_string(
    "checkpoint",
    None,
    "A checkpoint prefix, e.g. runs/default/checkpoints/ckpt-4000; its run "
    "directory is two levels up unless --run_dir is given.",
  )
  flags.DEFINE_string(
    "base_path", None, "Model base path (required): versions go in <base_path>/<N>."
  )
  flags.DEFINE_integer("version", None, "Version number (default: one above the newest).")
  flags.DEFINE_string("model_name", "tfattn", "Model name recorded in the warm-up requests.")
  cli.define_flags(DecodeOptions, optional=True, unset="the run's")
  flags.DEFINE_multi_string("warmup_text", None, "Texts for the warm-up requests.")
  flags.DEFINE_integer(
    "average_last",
    None,
    "Average the weights of the last N kept "
    "checkpoints (default: the weights the run's final evaluation judged: "
    "its last, averaged or best-on-validation checkpoints).",
    lower_bound=1,
  )
  flags.DEFINE_enum(
    "decode",
    "graph",
    list(DECODE_MODES),
    "How the signatures run their searches: graph = graph-mode cached search (loads on "
    "every TF Serving image, CPU and GPU, with no flag); xla = padded search compiled with "
    "XLA per source length bucket (TF Serving then needs --xla_cpu_compilation_enabled=true "
    "on CPU images, --xla_gpu_compilation_enabled=true on GPU images >= 2.18; GPU images "
    "<= 2.17 cannot serve it).",
  )
  flags.DEFINE_list(
    "warmup_batch_sizes",
    ["1"],
    "With --decode=xla: batch sizes the warm-up requests compile for every "
    "length bucket (list TF Serving's allowed_batch_sizes here).",
  )


def main(argv):
  del argv  # cli.run refuses positional arguments
  from absl import flags, logging

  f = flags.FLAGS
  if not f.base_path:
    raise cli.UsageError("--base_path is required: the directory that holds the versions")
  run_dir = f.run_dir or (os.path.dirname(os.path.dirname(f.checkpoint)) if f.checkpoint else None)
  if not run_dir:
    raise cli.UsageError(
      "give --run_dir (the training run) or --checkpoint (one of its checkpoints)"
    )
  try:
    batch_sizes = [int(size) for size in f.warmup_batch_sizes]
  except ValueError:
    raise cli.UsageError(
      "--warmup_batch_sizes must be a comma-separated list of integers, got "
      f"{','.join(f.warmup_batch_sizes)}"
    ) from None
  try:
    run_options = run_decode_options(run_dir)
  except ValueError as error:
    raise cli.UsageError(f"{RunDir(run_dir).run_config}: {error}") from None
  given = {
    name: value for name, value in cli.flag_values(DecodeOptions).items() if value is not None
  }  # unset decoding flags keep the run's values
  try:
    options = run_options.replace(**given)
  except ValueError as error:  # "beam_size must be >= 1, got 0": named by its flag
    raise cli.UsageError(f"--{error}") from None
  try:
    check_destination(run_dir, f.base_path, f.version)
  except ValueError as error:
    raise cli.UsageError(str(error)) from None
  cli.start_tensorflow_quietly()  # all checked that can be without it: now TensorFlow, quietly
  logging.info(
    "exporting %s to %s: version=%s checkpoint=%s average_last=%s decode=%s "
    "warmup_batch_sizes=%s decode options (%s): %s",
    run_dir,
    f.base_path,
    f.version or "next",
    f.checkpoint or "latest",
    f.average_last,
    f.decode,
    batch_sizes,
    "the run's" if not given else f"the run's, with {sorted(given)} from flags",
    options,
  )
  try:
    path = export(
      run_dir,
      f.base_path,
      options=options,
      version=f.version,
      checkpoint=f.checkpoint,
      model_name=f.model_name,
      warmup_texts=f.warmup_text,
      average_last=f.average_last,
      decode=f.decode,
      warmup_batch_sizes=batch_sizes,
    )
  except ValueError as error:
    raise cli.UsageError(str(error)) from error
  print(f"exported {path}")
  if f.decode == "xla":
    print(f"XLA export: {xla_compilation.TF_SERVING_NEEDS} (serving.server too)")


if __name__ == "__main__":
  _define_flags()
  cli.run(main)
