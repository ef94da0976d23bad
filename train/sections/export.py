"""The export section: what the run exports when it finishes (`python -m serving.export`)."""

import dataclasses
from typing import Optional

from tfattn.decode_options import DECODE_MODES
from tfattn.kinds import MODEL_KINDS
from train.sections.declare import MAY_CHANGE, run_setting


@dataclasses.dataclass(frozen=True)
class Export:
  """The export section."""

  export_base_path: Optional[str] = run_setting(
    None,
    "When training finishes, export a TF Serving version under this base path (runs "
    "`python -m serving.export`).",
    unset="no export",
    resume=MAY_CHANGE,
  )
  export_decode: Optional[str] = run_setting(
    "graph",
    "Decoding in the export (serving.export --decode): graph = graph-mode search (loads on "
    "every TF Serving image with no flag); xla = padded search compiled with XLA per source "
    "length bucket (TF Serving then needs --xla_cpu_compilation_enabled=true on CPU, "
    "--xla_gpu_compilation_enabled=true on GPU images >= 2.18).",
    choices=DECODE_MODES,
    # Saved when it could be "auto" (xla where a GPU was present): now the graph export,
    # which every TF Serving image loads with no flag.
    old_values={"auto": "graph"},
    resume=MAY_CHANGE,
  )

  def for_kind(self, kind: str) -> "Export":
    """Without `export_decode` for a kind that decodes nothing (a classifier)."""
    return self if MODEL_KINDS[kind].decodes else dataclasses.replace(self, export_decode=None)
