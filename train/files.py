"""Atomic file writes: a reader (or a crash) never sees half a file."""

import json
import os


def write_bytes_atomically(path, data):
  """Writes to a temporary file beside `path`, then renames it into place."""
  directory = os.path.dirname(path)
  if directory:
    os.makedirs(directory, exist_ok=True)
  temp = f"{path}.tmp-{os.getpid()}"
  with open(temp, "wb") as f:
    f.write(data)
  os.replace(temp, path)


def write_text_atomically(path, text):
  write_bytes_atomically(path, text.encode("utf-8"))


def write_json_atomically(path, value):
  write_text_atomically(path, json.dumps(value, indent=2, sort_keys=True))
