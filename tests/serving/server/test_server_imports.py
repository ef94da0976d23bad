"""The stand-in for tensorflow_model_server serves any SavedModel: nothing under serving/server/
or serving/tf_serving/ imports the model (tfattn), the training program (train) or the other
serving products (serving.export, serving.tools), at module level or inside a function."""

import ast
import glob
import os
import subprocess
import sys

import pytest

from train_helpers import REPO

FORBIDDEN = ("tfattn", "train", "serving.export", "serving.tools")
PACKAGES = ("serving/server", "serving/tf_serving")


def _modules():
  return sorted(p for d in PACKAGES for p in glob.glob(os.path.join(REPO, d, "*.py")))


def _imported(path):
  with open(path, encoding="utf-8") as f:
    tree = ast.parse(f.read())
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      yield from (alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
      yield node.module
      yield from (f"{node.module}.{alias.name}" for alias in node.names)


def _forbidden(name):
  return any(name == f or name.startswith(f + ".") for f in FORBIDDEN)


def test_the_rule_sees_a_forbidden_import(tmp_path):
  bad = tmp_path / "bad.py"
  bad.write_text("def f():\n  from serving import export\n  import tfattn.text\n")
  assert sorted(n for n in _imported(str(bad)) if _forbidden(n)) == [
    "serving.export",
    "tfattn.text",
  ]


def test_the_server_imports_nothing_of_the_model_or_training():
  modules = _modules()
  assert os.path.join(REPO, "serving", "server", "__main__.py") in modules
  offenders = {
    os.path.relpath(path, REPO): sorted(n for n in _imported(path) if _forbidden(n))
    for path in modules
  }
  assert {path: names for path, names in offenders.items() if names} == {}


@pytest.mark.slow  # a fresh interpreter imports every module of the server
def test_importing_every_server_module_loads_no_tfattn_or_train():
  names = [
    os.path.relpath(p, REPO)[: -len(".py")].replace(os.sep, ".").removesuffix(".__init__")
    for p in _modules()
    if not p.endswith("__main__.py")
  ]
  code = (
    "import importlib, sys\n"
    f"for name in {names!r}: importlib.import_module(name)\n"
    "print(sorted(m for m in sys.modules if m.split('.')[0] in ('tfattn', 'train')"
    " or m.startswith(('serving.export', 'serving.tools'))))\n"
  )
  result = subprocess.run(
    [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
  )
  assert result.stdout.strip() == "[]"
