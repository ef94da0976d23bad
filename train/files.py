"""Atomic file writes: a reader (or a crash) never sees half a file."""

import json
import os


def write_text_atomically(path, text):
  """Writes to a temporary file beside `path`, then renames it into place."""
  directory = os.path.dirname(path)
  if directory:
    os.makedirs(directory, exist_ok=True)
  temp = f"{path}.tmp-{os.getpid()}"
  with open(temp, "w", encoding="utf-8") as f:
    f.write(text)
  os.replace(temp, path)


def write_json_atomically(path, value):
  write_text_atomically(path, json.dumps(value, indent=2, sort_keys=True))
