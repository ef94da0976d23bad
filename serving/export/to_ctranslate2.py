"""`python -m serving.export.to_ctranslate2`: a trained seq2seq run -> a CTranslate2 model
directory (`serving/export/ctranslate2_model.py`), the run's vocabulary files beside it.

  python -m serving.export.to_ctranslate2 --run_dir=runs/multi30k_de_en \
      --output_dir=models/ct2 [--quantization=int8]

Every mistake that can be found before TensorFlow and CTranslate2 load is one line (exit 2):
no run, an output directory that exists, CTranslate2 not installed, a model it cannot express.
"""

import cli

import dataclasses
import json
import os
from typing import Optional

from serving.export import ctranslate2_model
from serving.export.trained_run import check_run_dir
from settings import setting
from tfattn.config import TransformerConfig


@dataclasses.dataclass(frozen=True)
class ToCTranslate2Flags:
  """The flags of `python -m serving.export.to_ctranslate2`."""

  run_dir: Optional[str] = setting(None, "The trained seq2seq run directory (required).")
  output_dir: Optional[str] = setting(None, "The CTranslate2 model directory to create (required).")
  quantization: Optional[str] = setting(
    None,
    "Store the weights as one of CTranslate2's types (default float32; any model can also be "
    "loaded with another compute_type).",
    choices=ctranslate2_model.QUANTIZATIONS,
  )
  checkpoint: Optional[str] = setting(
    None, "A checkpoint prefix to convert (default: the weights the run's export would serve)."
  )


def main(argv):
  del argv  # cli.run refuses positional arguments
  from absl import flags

  f = flags.FLAGS
  if not f.run_dir or not f.output_dir:
    raise cli.UsageError("give --run_dir (the trained run) and --output_dir (the new directory)")
  try:
    layout = check_run_dir(f.run_dir)
  except ValueError as error:
    raise cli.UsageError(str(error)) from None
  if os.path.exists(f.output_dir):
    raise cli.UsageError(f"--output_dir {f.output_dir} exists: give a new directory")
  with open(layout.task) as handle:
    kind = json.load(handle)["kind"]
  if kind != "seq2seq":
    raise cli.UsageError(f"{f.run_dir} is a {kind} run: only seq2seq runs convert to CTranslate2")
  with open(layout.model_config) as handle:
    config = TransformerConfig.from_json(handle.read())
  try:
    ctranslate2_model.check_convertible(config)
  except ValueError as error:
    raise cli.UsageError(str(error)) from None
  try:
    import ctranslate2  # noqa: F401
  except ImportError:
    raise cli.UsageError(
      "CTranslate2 is not installed: pip install -r requirements-ctranslate2.txt"
    ) from None
  cli.start_tensorflow_quietly()
  try:
    path = ctranslate2_model.convert_run(f.run_dir, f.output_dir, f.quantization, f.checkpoint)
  except ValueError as error:
    raise cli.UsageError(str(error)) from None
  print(f"wrote {path} (translate with ctranslate2.Translator({path!r}); docs/speed.md)")


if __name__ == "__main__":
  cli.define_flags(ToCTranslate2Flags)
  cli.run(main)
