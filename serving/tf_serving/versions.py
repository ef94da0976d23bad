"""TF Serving's model base path: `<base>/<version>/saved_model.pb`, where a version is a folder
named by an ASCII integer. The one scanner the exporter, `serving.export.check` and the server
use."""

import os
from typing import List

SAVED_MODEL_FILE = "saved_model.pb"
# Files beside the SavedModel that TF Serving reads (warm-up requests) or ignores (ours).
ASSETS_EXTRA = "assets.extra"


def version_numbers(base_path: str, servable_only: bool = True) -> List[int]:
  """The versions under `base_path`, ascending: folders named by an integer that hold a
  SavedModel (`servable_only`), or every such folder (what a new version must not reuse).
  A base path that does not exist has none."""
  if not os.path.isdir(base_path):
    return []
  found = []
  for name in os.listdir(base_path):
    # isdigit() accepts other scripts' digits ("٣"); TF Serving reads ASCII numbers only.
    if not (name.isascii() and name.isdigit()):
      continue
    folder = os.path.join(base_path, name)
    if os.path.isdir(folder) and (
      not servable_only or os.path.isfile(os.path.join(folder, SAVED_MODEL_FILE))
    ):
      found.append(int(name))
  return sorted(found)


def next_version(base_path: str) -> int:
  """One above the highest version folder, whether or not it holds a model yet."""
  return max(version_numbers(base_path, servable_only=False), default=0) + 1
