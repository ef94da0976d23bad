"""The export: a trained run -> TF Serving's `<base>/<version>/` layout. The only part of
`serving/` that imports `tfattn`. One job a module:

  export_kinds   the kinds it exports, each with the module it saves (modules, attention_export)
  trained_run    reading a run directory: its decoding options, chosen weights, model
  destination    where the version goes, checked before TensorFlow loads; the export info
  warmup_texts   the texts of the warm-up requests
  saved_model    writing one version, atomically
  __main__       `python -m serving.export`; check: `python -m serving.export.check`

    from serving import export
    export.export("runs/default", "models/tfattn")
"""

from serving.export.destination import EXPORT_INFO_FILE, check_destination, is_xla_export
from serving.export.export_kinds import EXPORT_KINDS, ExportKind
from serving.export.saved_model import check_decode, export
from serving.export.trained_run import TrainedRun, final_weights, load_trained, run_decode_options

__all__ = [
  "EXPORT_INFO_FILE",
  "EXPORT_KINDS",
  "ExportKind",
  "TrainedRun",
  "check_decode",
  "check_destination",
  "export",
  "final_weights",
  "is_xla_export",
  "load_trained",
  "run_decode_options",
]
