"""Writes one version: a trained run -> `<base>/<version>/` (the SavedModel, its warm-up records
and its export info), through a hidden temporary directory renamed into place, so a server
polling the base path never sees a partial version; an existing version is never overwritten."""

import json
import os
import shutil
from typing import Optional, Sequence

from serving.export.destination import EXPORT_INFO_FILE, check_destination
from serving.export.export_kinds import EXPORT_KINDS
from serving.export.trained_run import load_trained, run_decode_options
from serving.export.warmup_texts import warmup_requests
from serving.tf_serving import versions
from tfattn.decode_options import DECODE_MODES, DecodeOptions


def check_decode(decode):
  """The decoding mode, "graph" or "xla"; a ValueError names any other. There is no automatic
  choice: "graph" is the export every stock TF Serving image (CPU and GPU, 2.12-2.19) loads with
  no flag; "xla" needs a server flag (xla_compilation.TF_SERVING_NEEDS)."""
  if decode not in DECODE_MODES:
    raise ValueError(f"--decode must be graph or xla, got {decode!r}")
  return decode


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
  serving_dtype: Optional[str] = None,
) -> str:
  """Exports the run's model as `<base_path>/<version>`; returns that directory.

  Args:
    run_dir: the training run directory (`tfattn/support/run_dir.py`).
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
    serving_dtype: None: compute as the run trained (its `compute_dtype`, float32 weights);
      "float32", "bfloat16" or "float16": compute in it with the matmul and embedding weights
      stored in it (`tfattn.precision.for_serving`: norms, softmax, logits and scores float32).
  """
  import tensorflow as tf

  from serving.tf_serving import warmup

  version, final = check_destination(run_dir, base_path, version)
  decode = check_decode(decode)
  if not warmup_batch_sizes or min(warmup_batch_sizes) < 1:
    raise ValueError(f"--warmup_batch_sizes must be positive integers, got {warmup_batch_sizes}")
  if options is None:
    options = run_decode_options(run_dir)
  task, model, tokenizers, averaged = load_trained(run_dir, checkpoint, average_last)
  kind = EXPORT_KINDS[task["kind"]]
  if serving_dtype is not None:
    from tfattn import precision

    model = precision.for_serving(model, kind.build_model, serving_dtype)
  module = kind.export_module(model, tokenizers, task, options, decode)
  requests = warmup_requests(module, tokenizers["source"], warmup_texts, warmup_batch_sizes)
  created_base = not os.path.exists(base_path)
  os.makedirs(base_path, exist_ok=True)
  temp = os.path.join(base_path, f".tmp-export-{version}-{os.getpid()}")
  shutil.rmtree(temp, ignore_errors=True)
  try:
    signatures = module.signatures()
    tf.saved_model.save(module, temp, signatures=signatures)
    os.makedirs(os.path.join(temp, versions.ASSETS_EXTRA), exist_ok=True)
    warmup.write_warmup_file(os.path.join(temp, warmup.WARMUP_FILE), model_name, requests)
    decodes = module.decode_mode is not None
    with open(os.path.join(temp, EXPORT_INFO_FILE), "w") as f:
      json.dump(
        {
          "task": task,
          "model_config": json.loads(model.config.to_json()),
          # What the signatures compute in, and what the weights are stored in.
          "compute_dtype": model.config.compute_dtype,
          "weights_dtype": serving_dtype or "float32",
          # What the attention-picture tool may ask for, read before it loads TensorFlow.
          "model_description": kind.model_description,
          "attention_layers": kind.attention_layers(model.config),
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
