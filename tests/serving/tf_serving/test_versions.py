"""serving.tf_serving.versions: the one scanner of a model base path."""

import os

from serving.tf_serving import versions


def _version(base, name, model=True):
  os.makedirs(base / name)
  if model:
    (base / name / versions.SAVED_MODEL_FILE).write_bytes(b"")


def test_only_ascii_numbered_folders_with_a_model_are_versions(tmp_path):
  for name in ("0", "1", "10", "2"):
    _version(tmp_path, name)
  _version(tmp_path, "3", model=False)  # being written, or not a model
  _version(tmp_path, "\u0663")  # an Arabic-Indic three: not an ASCII number
  _version(tmp_path, ".tmp-export-4-123")  # an export in progress
  (tmp_path / "5").write_text("a file, not a folder")
  assert versions.version_numbers(str(tmp_path)) == [0, 1, 2, 10]
  assert versions.version_numbers(str(tmp_path), servable_only=False) == [0, 1, 2, 3, 10]
  assert versions.next_version(str(tmp_path)) == 11


def test_a_missing_base_path_has_no_versions(tmp_path):
  assert versions.version_numbers(str(tmp_path / "nope")) == []
  assert versions.next_version(str(tmp_path / "nope")) == 1
