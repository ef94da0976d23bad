"""`python -m serving.export`: a trained run -> TF Serving's `<base>/<version>/` layout.

The version is written to a hidden temporary directory and renamed into place, so a server
polling the base path never sees a partial version; an existing version is never overwritten.
"""

import cli

import json
import os
import shutil
from typing import Optional, Sequence

if __name__ == "__main__":
  cli.start_tensorflow_quietly()  # before TensorFlow is imported below

import tensorflow as tf

from serving import versions, warmup
from serving.modules import DECODE_MODES, ClassifierExport, Seq2SeqExport
from tfattn import kinds, text
from tfattn.checkpoints import checkpoints_to_average, restore_average
from tfattn.run_dir import RunDir

# What the export writes beside the SavedModel: the settings it was made with.
EXPORT_INFO_FILE = os.path.join(warmup.ASSETS_EXTRA, "tfattn.json")


class _Seq2SeqExportKind(kinds.Seq2SeqModel):

  def export_module(self, model, tokenizers, task, beam_size, alpha, decode):
    """The exported module and the decoding mode it runs."""
    del task  # nothing beyond the model config
    return Seq2SeqExport(model, tokenizers["source"], tokenizers["target"], beam_size=beam_size,
                         alpha=alpha, decode=decode), decode


class _ClassifierExportKind(kinds.ClassifierModel):

  def export_module(self, model, tokenizers, task, beam_size, alpha, decode):
    del beam_size, alpha, decode  # one forward pass: nothing to decode
    return ClassifierExport(model, tokenizers["source"],
                            truncate=task.get("truncate", "right")), None


EXPORT_KINDS = {kind.name: kind for kind in (_Seq2SeqExportKind(), _ClassifierExportKind())}


def final_weights(run_dir: str) -> Optional[list]:
  """The checkpoint prefixes of the weights the run's final evaluation judged (eval.json's
  "weights": the last, the averaged or the best-on-validation checkpoints), or None for a run
  that has not finished (or finished before eval.json named them)."""
  layout = RunDir(run_dir)
  if not os.path.exists(layout.eval_metrics):
    return None
  with open(layout.eval_metrics) as f:
    weights = json.load(f).get("weights")
  if not weights:
    return None
  return [os.path.join(layout.checkpoints, name) for name in weights["checkpoints"]]


def load_trained(run_dir: str, checkpoint: Optional[str] = None,
                 average_last: Optional[int] = None):
  """Rebuilds the model of a run directory and restores the weights its final evaluation
  judged (or the latest checkpoint of an unfinished run), or the given checkpoint, or the
  average of the last `average_last` checkpoints.

  Returns (task info dict, model, {side: tokenizer}, the checkpoints restored)."""
  layout = RunDir(run_dir)
  layout.check_trained()
  task = layout.read_task()
  kind = kinds.lookup(task["kind"], EXPORT_KINDS)
  model = kind.build_model(layout.read_model_config())
  averaged = None if checkpoint or average_last else final_weights(run_dir)
  if averaged is None:
    averaged = checkpoints_to_average(layout.checkpoints, checkpoint, average_last or 1)
  restore_average(model, averaged)
  tokenizers = {side: layout.load_tokenizer(side) for side in kind.vocabulary_sides}
  return task, model, tokenizers, averaged


def bucket_warmup_texts(tokenizer, buckets):
  """One text per source length bucket whose token count (after truncation to the last bucket,
  max_length) falls in that bucket, so replaying them compiles every XLA program a request can
  need at that batch size. Texts repeat one vocabulary word; the repeat count comes from the
  measured tokens of 1 and 2 repeats, and the resulting counts are checked."""
  reserved = len(text.RESERVED_TOKENS)
  lower_bounds = (0,) + tuple(buckets[:-1])
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
      if all(low < min(length, buckets[-1]) <= high
             for low, length, high in zip(lower_bounds, count(texts), buckets)):
        return texts
  raise ValueError("found no vocabulary word whose repetitions fill every source length bucket "
                   f"{buckets}; export with --decode=graph")


def resolve_decode(decode):
  """"auto" -> "xla" where this machine has a GPU (TF Serving's GPU builds compile XLA by
  default), else "graph" (its CPU builds refuse XLA unless --xla_cpu_compilation_enabled)."""
  if decode == "auto":
    return "xla" if tf.config.list_physical_devices("GPU") else "graph"
  if decode not in DECODE_MODES:
    raise ValueError(f"--decode must be auto, graph or xla, got {decode!r}")
  return decode


def export(run_dir: str, base_path: str, *, version: Optional[int] = None,
           checkpoint: Optional[str] = None, model_name: str = "tfattn", beam_size: int = 4,
           alpha: float = 0.6, warmup_texts: Optional[Sequence[str]] = None,
           average_last: Optional[int] = None, decode: str = "auto",
           warmup_batch_sizes: Sequence[int] = (1,)) -> str:
  """Exports the run's model as `<base_path>/<version>`; returns that directory.

  Args:
    run_dir: the training run directory (`tfattn/run_dir.py`).
    base_path: TF Serving's model base path; created if missing.
    version: the version number; default one above the highest version folder.
    checkpoint: a checkpoint prefix to export instead of the latest.
    model_name: the model name written into the warm-up requests.
    beam_size: serving_default's beam (1 = greedy).
    alpha: the beam search length penalty.
    warmup_texts: texts of the first warm-up request (default: a few vocabulary pieces and "").
    average_last: export the mean of the last N kept checkpoints (default: the weights the
      run's final evaluation judged).
    decode: "graph", "xla" or "auto" (see `resolve_decode`); with "xla" the warm-up records hold
      one request per source length bucket and batch size in `warmup_batch_sizes`.
    warmup_batch_sizes: batch sizes the XLA warm-up compiles.
  """
  if os.path.exists(base_path) and not os.path.isdir(base_path):
    raise ValueError(f"--base_path={base_path} is a file; pass a directory")
  decode = resolve_decode(decode)
  if not warmup_batch_sizes or min(warmup_batch_sizes) < 1:
    raise ValueError(f"--warmup_batch_sizes must be positive integers, got {warmup_batch_sizes}")
  version = versions.next_version(base_path) if version is None else int(version)
  if version <= 0:
    raise ValueError(f"--version must be a positive integer, got {version}")
  final = os.path.join(base_path, str(version))
  if os.path.exists(final):
    raise ValueError(f"{final} already exists; versions are never overwritten")
  task, model, tokenizers, averaged = load_trained(run_dir, checkpoint, average_last)
  module, decode = EXPORT_KINDS[task["kind"]].export_module(model, tokenizers, task, beam_size,
                                                            alpha, decode)
  source = tokenizers["source"]
  if warmup_texts is None:  # a few vocabulary pieces as text, and the empty string
    first_pieces = tf.range(len(text.RESERVED_TOKENS), min(source.vocab_size, 12))
    warmup_texts = [source.detokenize(first_pieces[tf.newaxis])[0].numpy().decode(), ""]
  warmup_requests = [("serving_default", {"text": tf.constant(warmup_texts).numpy()})]
  if decode == "xla":
    bucket_texts = bucket_warmup_texts(source, module.length_buckets)
    warmup_requests += [("serving_default", {"text": tf.constant([t] * size).numpy()})
                        for size in sorted(set(warmup_batch_sizes)) for t in bucket_texts]
  created_base = not os.path.exists(base_path)
  os.makedirs(base_path, exist_ok=True)
  temp = os.path.join(base_path, f".tmp-export-{version}-{os.getpid()}")
  shutil.rmtree(temp, ignore_errors=True)
  try:
    tf.saved_model.save(module, temp, signatures=module.signatures())
    os.makedirs(os.path.join(temp, warmup.ASSETS_EXTRA), exist_ok=True)
    warmup.write_warmup_file(os.path.join(temp, warmup.WARMUP_FILE), model_name, warmup_requests)
    with open(os.path.join(temp, EXPORT_INFO_FILE), "w") as f:
      json.dump({"task": task, "model_config": json.loads(model.config.to_json()),
                 "beam_size": beam_size, "alpha": alpha, "decode": decode,
                 "length_buckets": list(module.length_buckets) if decode == "xla" else None,
                 "checkpoints": [os.path.basename(p) for p in averaged]}, f, indent=2)
    os.rename(temp, final)  # atomic on one file system
  except BaseException:
    shutil.rmtree(temp, ignore_errors=True)
    if created_base and not os.listdir(base_path):
      os.rmdir(base_path)  # leave nothing behind a failed first export
    raise
  return final


def _define_flags():
  from absl import flags
  flags.DEFINE_string("run_dir", None, "Training run directory (uses its latest checkpoint).")
  flags.DEFINE_string("checkpoint", None,
                      "A checkpoint prefix, e.g. runs/default/checkpoints/ckpt-4000; its run "
                      "directory is two levels up unless --run_dir is given.")
  flags.DEFINE_string("base_path", None,
                      "Model base path (required): versions go in <base_path>/<N>.")
  flags.DEFINE_integer("version", None, "Version number (default: one above the newest).")
  flags.DEFINE_string("model_name", "tfattn", "Model name recorded in the warm-up requests.")
  flags.DEFINE_integer("beam_size", 4, "Beam size of serving_default (1 = greedy).", lower_bound=1)
  flags.DEFINE_float("alpha", 0.6, "Beam search length penalty.", lower_bound=0.0)
  flags.DEFINE_multi_string("warmup_text", None, "Texts for the warm-up requests.")
  flags.DEFINE_integer("average_last", None, "Average the weights of the last N kept "
                       "checkpoints (default: the weights the run's final evaluation judged: "
                       "its last, averaged or best-on-validation checkpoints).",
                       lower_bound=1)
  flags.DEFINE_enum("decode", "auto", ["auto"] + list(DECODE_MODES),
                    "Decoding in serving_default/translate_ids: xla = padded search compiled "
                    "with XLA per source length bucket (TF Serving on CPU then needs "
                    "--xla_cpu_compilation_enabled=true); graph = graph-mode cached search; "
                    "auto = xla where this machine has a GPU, else graph.")
  flags.DEFINE_list("warmup_batch_sizes", ["1"],
                    "With --decode=xla: batch sizes the warm-up requests compile for every "
                    "length bucket (list TF Serving's allowed_batch_sizes here).")


def main(argv):
  del argv  # cli.run refuses positional arguments
  from absl import flags, logging
  f = flags.FLAGS
  if not f.base_path:
    raise cli.UsageError("--base_path is required: the directory that holds the versions")
  run_dir = f.run_dir or (os.path.dirname(os.path.dirname(f.checkpoint)) if f.checkpoint
                          else None)
  if not run_dir:
    raise cli.UsageError("give --run_dir (the training run) or --checkpoint (one of its "
                         "checkpoints)")
  try:
    batch_sizes = [int(size) for size in f.warmup_batch_sizes]
  except ValueError:
    raise cli.UsageError("--warmup_batch_sizes must be a comma-separated list of integers, got "
                         f"{','.join(f.warmup_batch_sizes)}") from None
  logging.info("exporting %s to %s: version=%s checkpoint=%s average_last=%s beam_size=%d "
               "alpha=%s decode=%s warmup_batch_sizes=%s", run_dir, f.base_path,
               f.version or "next", f.checkpoint or "latest", f.average_last, f.beam_size,
               f.alpha, resolve_decode(f.decode), batch_sizes)
  try:
    path = export(run_dir, f.base_path, version=f.version, checkpoint=f.checkpoint,
                  model_name=f.model_name, beam_size=f.beam_size, alpha=f.alpha,
                  warmup_texts=f.warmup_text, average_last=f.average_last, decode=f.decode,
                  warmup_batch_sizes=batch_sizes)
  except ValueError as error:
    raise cli.UsageError(str(error)) from error
  print(f"exported {path}")


if __name__ == "__main__":
  _define_flags()
  cli.run(main)
