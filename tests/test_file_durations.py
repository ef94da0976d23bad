"""The suite's own timing record (tests/file_durations.py, make test-durations): the processes'
parts sum per file, longest first, and the conftest hands the long files out first."""

import json
import os
import subprocess
import sys

import file_durations
import pytest

from train_helpers import REPO, environment


def test_the_parts_of_two_processes_sum_per_file_longest_first(tmp_path):
  out = str(tmp_path / "out")
  file_durations.write_part(out, "gw0", {"a/test_x.py": 3.0, "b/test_y.py": 1.5})
  file_durations.write_part(
    out, "gw1", {"a/test_x.py": 2.0, "c/test_z.py": 9.0}, {"c/test_z.py::test_heavy": 1.34}
  )
  target = str(tmp_path / "durations.json")
  merged = file_durations.merge(out, target)
  assert list(merged.items()) == [("c/test_z.py", 9.0), ("a/test_x.py", 5.0), ("b/test_y.py", 1.5)]
  assert file_durations.load(target) == merged
  assert file_durations.load_slow_unit_tests(target) == {"c/test_z.py::test_heavy": 1.3}
  assert file_durations.load(str(tmp_path / "none.json")) == {}
  assert file_durations.load_slow_unit_tests(str(tmp_path / "none.json")) == {}


def test_the_recorded_slow_unit_tests_are_marked_slow(request):
  """The conftest marks the tests the record names slow (`make test-fast` deselects them); under
  -m "not slow" none of them is left in the session."""
  recorded = file_durations.load_slow_unit_tests()
  assert recorded and min(recorded.values()) >= file_durations.FAST_TEST_LIMIT
  for item in request.session.items:
    if item.nodeid in recorded:
      assert item.get_closest_marker("slow") is not None, item.nodeid


def test_the_table_sums_each_products_files():
  files = {
    "serving/server/test_a.py": 6.0,
    "serving/server/test_b.py": 2.0,
    "serving/test_c.py": 1.0,
    "tfattn/test_d.py": 3.0,
    "test_e.py": 0.5,
  }
  assert file_durations.by_product(files) == [
    ("serving/server", 8.0, 2),
    ("tfattn", 3.0, 1),
    ("serving", 1.0, 1),
    ("top level", 0.5, 1),
  ]
  table = file_durations.product_table(files).splitlines()
  assert table[2] == "| serving/server | 2 | 8 | 64.0% |"
  assert table[-1] == "| all | 5 | 12 | 100% |"


@pytest.mark.slow  # runs pytest in a subprocess
def test_a_recorded_run_measures_each_file_it_ran(tmp_path):
  """A real recording: two tiny files under pytest, the parts written by the conftest's hooks."""
  out = tmp_path / "out"
  env = dict(environment(), **{file_durations.OUT_VARIABLE: str(out)})
  result = subprocess.run(
    [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "tests/test_settings.py"],
    cwd=REPO,
    env=env,
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert result.returncode == 0, result.stdout[-2000:]
  (part,) = os.listdir(out)
  with open(out / part) as f:
    part = json.load(f)
  assert list(part["files"]) == ["test_settings.py"] and part["files"]["test_settings.py"] > 0
  assert isinstance(part["slow_unit_tests"], dict)
