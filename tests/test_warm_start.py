"""The warm start (tests/warm_start.py) is python to the test that starts it: each case runs the
same command with the real interpreter and warm, and expects the same status and output."""

import functools
import os
import signal
import subprocess
import sys
import textwrap

import pytest

import warm_start
from train_helpers import poll_until

pytestmark = pytest.mark.slow  # runs programs

PROGRAM = textwrap.dedent(
  """
  import atexit, os, sys
  main = sys.modules["__main__"]
  atexit.register(
    lambda: print("atexit ran", os.path.basename(sys.argv[0]), "__file__" in dir(main))
  )
  print("argv", sys.argv[1:], "cwd", os.path.basename(os.getcwd()), "path0", repr(sys.path[0]))
  print("variable", os.environ.get("WARM_START_TEST"))
  print("stdin", sys.stdin.read().strip())
  print("to stderr", file=sys.stderr)
  if sys.argv[1:] == ["fail"]:
    raise ValueError("failed as asked")
  if sys.argv[1:] == ["interrupt"]:
    raise KeyboardInterrupt
  if sys.argv[1:] == ["killed"]:
    os.kill(os.getpid(), 9)
  sys.exit(int(sys.argv[1]) if sys.argv[1:] and sys.argv[1].isdigit() else None)
  """
)


def _run(python, args, tmp_path, stdin="input line"):
  result = subprocess.run(
    [*python, *args],
    cwd=tmp_path,
    env=warm_start.environment(WARM_START_TEST="seen"),
    input=stdin,
    capture_output=True,
    text=True,
    timeout=120,
  )
  # The error's line, not the whole traceback: python's own frames above the program's differ.
  lines = result.stderr.splitlines()
  return result.returncode, result.stdout, lines[:1], lines[-1:]


@pytest.fixture
def script(tmp_path):
  path = tmp_path / "program.py"
  path.write_text(PROGRAM)
  return path


@pytest.mark.parametrize("arguments", [[], ["3"], ["fail"], ["interrupt"], ["killed"]])
def test_a_script_runs_as_python_runs_it(script, tmp_path, arguments):
  real = _run([sys.executable], [str(script), *arguments], tmp_path)
  warm = _run(warm_start.python(), [str(script), *arguments], tmp_path)
  assert warm == real
  assert "variable seen" in real[1] and "stdin input line" in real[1]
  assert ("atexit ran program.py" in real[1]) == (arguments != ["killed"])


def test_a_module_and_code_run_as_python_runs_them(script, tmp_path):
  for args in (["-m", "program", "a", "b"], ["-c", PROGRAM, "7"]):
    real = _run([sys.executable], args, tmp_path)
    warm = _run(warm_start.python(), args, tmp_path)
    assert warm == real, args
  assert real[0] == 7


def test_it_is_warm_only_where_a_real_start_would_match(tmp_path):
  code = ["-c", "import sys; print('tensorflow' in sys.modules)"]
  assert _run(warm_start.python(), code, tmp_path)[1] == "True\n"  # imported before the fork
  env = warm_start.environment(XLA_FLAGS="--xla_dump_to=/nowhere")  # read when TF starts
  cold = subprocess.run([*warm_start.python(), *code], env=env, capture_output=True, text=True)
  assert cold.stdout == "False\n"  # the real interpreter ran it
  assert _run(warm_start.python(), ["-u", *code], tmp_path)[1] == "False\n"  # an option: cold


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_to_it_reaches_the_program(tmp_path, signum):
  ready = tmp_path / "ready"
  code = f"import pathlib, time; pathlib.Path({str(ready)!r}).touch(); time.sleep(60)"
  outcomes = []
  for python in ([sys.executable], warm_start.python()):
    process = subprocess.Popen(
      [*python, "-c", code],
      env=warm_start.environment(),
      stderr=subprocess.PIPE,
      text=True,
      # As from a terminal: a suite started in the background (`make test &`) ignores SIGINT,
      # and a python started with it ignored never takes Ctrl-C.
      preexec_fn=functools.partial(signal.signal, signal.SIGINT, signal.SIG_DFL),
    )
    poll_until(ready.exists, "the program started")
    ready.unlink()
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=30)
    outcomes.append((process.returncode, stderr.strip().splitlines()[-1:]))
  assert outcomes[1] == outcomes[0]
  assert outcomes[0][0] == -signum


def test_killing_it_kills_the_program(tmp_path):
  pid_file = tmp_path / "pid"
  code = (
    f"import os, pathlib, time; pathlib.Path({str(pid_file)!r}).write_text(str(os.getpid()))\n"
    "time.sleep(60)"
  )
  process = subprocess.Popen([*warm_start.python(), "-c", code], env=warm_start.environment())
  pid = int(poll_until(lambda: pid_file.exists() and pid_file.read_text(), "the program's pid"))
  assert pid != process.pid  # the program is the server's child, not the launcher
  process.kill()
  process.wait(timeout=30)

  def gone():
    try:
      os.kill(pid, 0)
    except ProcessLookupError:
      return True
    return False

  poll_until(gone, "the program killed with its launcher", timeout=30)


def test_a_program_it_starts_with_sys_executable_starts_warm_too(tmp_path):
  inner = "import sys; print('tensorflow' in sys.modules); sys.exit(5)"
  outer = (
    "import subprocess, sys\n"
    f"done = subprocess.run([sys.executable, '-c', {inner!r}], capture_output=True, text=True)\n"
    "print(done.stdout.strip(), done.returncode)"
  )
  assert _run(warm_start.python(), ["-c", outer], tmp_path)[1] == "True 5\n"
  assert _run([sys.executable], ["-c", outer], tmp_path)[1] == "False 5\n"


def test_threads_asking_at_once_share_one_server():
  import concurrent.futures

  with concurrent.futures.ThreadPoolExecutor(4) as pool:
    commands = list(pool.map(lambda _: warm_start.python(), range(4)))
  assert all(command == commands[0] for command in commands)
