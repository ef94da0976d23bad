"""`python -m serving.export`: a trained run -> TF Serving's `<base>/<version>/` layout.

The version is written to a hidden temporary directory and renamed into place, so a server
polling the base path never sees a partial version; an existing version is never overwritten.

TensorFlow is imported inside the functions that build and save the export: the program checks
its flags, the run directory and the base path first, so a mistake is told at once.
"""

import cli

import dataclasses
import os
from typing import List, Optional

from serving.export.destination import check_destination
from serving.export.saved_model import export
from serving.export.trained_run import run_decode_options
from serving.tf_serving import xla_compilation
from settings import setting
from tfattn.decode_options import DECODE_MODES, DecodeOptions
from tfattn.support.run_dir import RunDir


@dataclasses.dataclass(frozen=True)
class ExportFlags:
  """The flags of `python -m serving.export` (the decoding options come from DecodeOptions)."""

  run_dir: Optional[str] = setting(None, "Training run directory (uses its latest checkpoint).")
  checkpoint: Optional[str] = setting(
    None,
    "A checkpoint prefix, e.g. runs/default/checkpoints/ckpt-4000; its run "
    "directory is two levels up unless --run_dir is given.",
  )
  base_path: Optional[str] = setting(
    None, "Model base path (required): versions go in <base_path>/<N>."
  )
  version: Optional[int] = setting(None, "Version number (default: one above the newest).")
  model_name: str = setting("tfattn", "Model name recorded in the warm-up requests.")
  warmup_text: Optional[List[str]] = setting(None, "Texts for the warm-up requests.", repeat=True)
  average_last: Optional[int] = setting(
    None,
    "Average the weights of the last N kept "
    "checkpoints (default: the weights the run's final evaluation judged: "
    "its last, averaged or best-on-validation checkpoints).",
    minimum=1,
  )
  decode: str = setting(
    "graph",
    "How the signatures run their searches: graph = graph-mode cached search (loads on "
    "every TF Serving image, CPU and GPU, with no flag); xla = padded search compiled with "
    "XLA per source length bucket (TF Serving then needs --xla_cpu_compilation_enabled=true "
    "on CPU images, --xla_gpu_compilation_enabled=true on GPU images >= 2.18; GPU images "
    "<= 2.17 cannot serve it).",
    choices=tuple(DECODE_MODES),
  )
  serving_dtype: Optional[str] = setting(
    None,
    "Compute in this dtype with the matmul and embedding weights stored in it (bfloat16: "
    "CPUs with AVX-512 BF16 or AMX and GPUs; float16: GPUs); layer norms, softmax, logits and "
    "the search's scores stay float32. Unset: as the run trained (its compute dtype, float32 "
    "weights).",
    choices=("float32", "bfloat16", "float16"),
  )
  warmup_batch_sizes: List[str] = setting(
    ("1",),
    "With --decode=xla: batch sizes the warm-up requests compile for every "
    "length bucket (list TF Serving's allowed_batch_sizes here).",
  )


def _define_flags():

  cli.define_flags(ExportFlags)
  cli.define_flags(DecodeOptions, optional=True, unset="the run's")


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
    "exporting %s to %s: version=%s checkpoint=%s average_last=%s decode=%s serving_dtype=%s "
    "warmup_batch_sizes=%s decode options (%s): %s",
    run_dir,
    f.base_path,
    f.version or "next",
    f.checkpoint or "latest",
    f.average_last,
    f.decode,
    f.serving_dtype or "the run's",
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
      serving_dtype=f.serving_dtype,
    )
  except ValueError as error:
    raise cli.UsageError(str(error)) from error
  print(f"exported {path}")
  if f.decode == "xla":
    print(f"XLA export: {xla_compilation.TF_SERVING_NEEDS} (serving.server too)")


if __name__ == "__main__":
  _define_flags()
  cli.run(main)
