"""Where a new version goes under TF Serving's model base path, checked before TensorFlow loads,
and what an existing version's export info says."""

import json
import os
from typing import Optional, Tuple

from serving.export.trained_run import check_run_dir
from serving.tf_serving import versions

# What the export writes beside the SavedModel: the settings it was made with.
EXPORT_INFO_FILE = os.path.join(versions.ASSETS_EXTRA, "tfattn.json")


def check_destination(
  run_dir: str, base_path: str, version: Optional[int] = None
) -> Tuple[int, str]:
  """(version, its folder) for a new export of `run_dir` under `base_path`, checked without
  TensorFlow: a ValueError if the run directory is not one, the base path is a file or the
  version exists (versions are never overwritten)."""
  if os.path.exists(base_path) and not os.path.isdir(base_path):
    raise ValueError(f"--base_path={base_path} is a file; pass a directory")
  check_run_dir(run_dir)
  version = versions.next_version(base_path) if version is None else int(version)
  if version <= 0:
    raise ValueError(f"--version must be a positive integer, got {version}")
  final = os.path.join(base_path, str(version))
  if os.path.exists(final):
    raise ValueError(f"{final} already exists; versions are never overwritten")
  return version, final


def is_xla_export(base_path: str) -> bool:
  """Whether the newest version under base_path is an XLA export of ours (its export info says
  decode "xla"): TF Serving, and serving.server, then need an XLA flag."""
  found = versions.version_numbers(base_path) if os.path.isdir(base_path) else []
  info = os.path.join(base_path, str(max(found)), EXPORT_INFO_FILE) if found else ""
  if not os.path.exists(info):
    return False
  with open(info) as f:
    return json.load(f).get("decode") == "xla"
