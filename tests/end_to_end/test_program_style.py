"""Every program the user runs has one flag style (issue 23 item 7): absl flags defined in the
program and run by `cli.run`, which gives `--help`, one-line errors and exit statuses alike."""

import ast
import glob
import os

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _programs():
  paths = []
  for pattern in ("train/*.py", "serving/*.py", "benchmarks/*.py"):
    for path in sorted(glob.glob(os.path.join(REPO, pattern))):
      with open(path, encoding="utf-8") as f:
        if 'if __name__ == "__main__":' in f.read():
          paths.append(path)
  return paths


def test_the_programs_are_found():
  names = {os.path.relpath(p, REPO) for p in _programs()}
  assert {"train/__main__.py", "serving/server.py", "benchmarks/rest_latency.py"} <= names


@pytest.mark.parametrize("path", _programs(), ids=lambda p: os.path.relpath(p, REPO))
def test_program_uses_absl_flags_through_cli_run(path):
  with open(path, encoding="utf-8") as f:
    tree = ast.parse(f.read())
  imported = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      imported |= {alias.name.split(".")[0] for alias in node.names}
    elif isinstance(node, ast.ImportFrom) and node.module:
      imported.add(node.module.split(".")[0])
  assert "argparse" not in imported and "optparse" not in imported
  calls = {ast.unparse(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
  assert "cli.run" in calls
