"""Every program the user runs has one flag style (issue 23 item 7): absl flags defined in the
program and run by `cli.run`, which gives `--help`, one-line errors and exit statuses alike."""

import ast
import glob
import os
import subprocess
import sys

import pytest

from train_helpers import own_lines

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _programs():
  paths = []
  for pattern in ("train/*.py", "serving/**/*.py", "benchmarks/*.py"):
    for path in sorted(glob.glob(os.path.join(REPO, pattern), recursive=True)):
      with open(path, encoding="utf-8") as f:
        if 'if __name__ == "__main__":' in f.read():
          paths.append(path)
  return paths


def test_the_programs_are_found():
  names = {os.path.relpath(p, REPO) for p in _programs()}
  assert {"train/__main__.py", "serving/server/__main__.py", "benchmarks/rest_latency.py"} <= names


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


def _defines(path):
  """The absl DEFINE_* calls written in one file (`flags.DEFINE_x(...)`, `DEFINE_x(...)`)."""
  with open(path, encoding="utf-8") as f:
    tree = ast.parse(f.read())
  return sorted(
    f"{os.path.relpath(path, REPO)}:{node.lineno}"
    for node in ast.walk(tree)
    if isinstance(node, ast.Call) and ast.unparse(node.func).split(".")[-1].startswith("DEFINE_")
  )


def test_every_flag_is_a_declared_setting_made_by_cli_define_flags(tmp_path):
  """One flag style (issue 40): no program, and no module of ours but cli.py, calls absl's
  DEFINE_* itself; every flag is a field of a declared dataclass (`settings.setting`)."""
  raw = tmp_path / "raw.py"
  raw.write_text('from absl import flags\nflags.DEFINE_integer("n", 1, "N.")\n')
  assert _defines(str(raw)) == [f"{os.path.relpath(str(raw), REPO)}:2"]  # the rule sees one
  ours = [
    path
    for pattern in ("*.py", "tfattn/**/*.py", "train/*.py", "serving/**/*.py", "benchmarks/*.py")
    for path in glob.glob(os.path.join(REPO, pattern), recursive=True)
    if os.path.basename(path) != "cli.py"
  ]
  assert [line for path in sorted(ours) for line in _defines(path)] == []


def _command(path):
  """How a user starts the program: `python -m train`, `python -m serving.x`, or the script."""
  relative = os.path.relpath(path, REPO)
  if relative.startswith("benchmarks"):
    return [sys.executable, path], os.path.basename(path)
  module = relative[: -len(".py")].replace(os.sep, ".").removesuffix(".__main__")
  return [sys.executable, "-m", module], module


# Programs whose own tables of user mistakes run at TF_CPP_MIN_LOG_LEVEL=0 already
# (tests/train/test_user_mistakes.py, tests/serving/server/test_server_cli.py).
MISTAKE_TABLES = {
  "train",
  "serving.export",
  "serving.export.check",
  "serving.tools.client",
  "serving.server",
  "serving.tools.demo",
}


@pytest.mark.slow  # starts every program, side by side
def test_a_user_mistake_is_our_one_line_whatever_tensorflow_logs(tmp_path):
  """Each program, given an unknown flag, exits 2 with exactly one line of ours, told before
  TensorFlow starts: even with TensorFlow's C++ logging forced on (TF_CPP_MIN_LOG_LEVEL=0, at
  which its import prints the oneDNN and cudart lines some machines print) nothing of
  TensorFlow's is there, and with the user's environment as it is the only line is ours."""
  base = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
  base.update(PYTHONPATH=REPO, CUDA_VISIBLE_DEVICES="", TMPDIR=str(tmp_path))
  runs = []
  for path in _programs():
    command, name = _command(path)
    levels = [] if name in MISTAKE_TABLES else ["0"]
    levels += [None] if name in ("train", "serving.server") else []
    for level in levels:
      env = dict(base) if level is None else dict(base, TF_CPP_MIN_LOG_LEVEL=level)
      process = subprocess.Popen(
        [*command, "--not_a_flag=1"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
      )
      runs.append((name, level, process))
  for name, level, process in runs:
    stdout, stderr = process.communicate(timeout=240)
    ours = own_lines(stderr)
    assert process.returncode == 2, f"{name} (level {level}): {stderr[-2000:]}"
    assert len(ours) == 1 and ours[0].startswith(f"{name}: error: "), (name, level, stderr)
    assert "not_a_flag" in ours[0] and stdout == ""
    assert stderr.splitlines() == ours, (name, level, stderr)
