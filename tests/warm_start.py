"""Programs started warm: `[*warm_start.python(), "-m", "train", ...]` runs like
`[sys.executable, "-m", "train", ...]` (to the test: its pipes, exit status or signal, the
signals it forwards, kill and timeouts) without paying `import tensorflow` (3-4 CPU s, most of
a tiny program's start) each time. Each test process starts one warm_start_server.py, which has
imported TensorFlow the way `cli.start_tensorflow_quietly` does and forks a child per program;
warm_start_launcher.py is the process the test sees. Where a fork could differ from a real
start (an import-time environment variable that differs from `environment()`'s, interpreter
options, an older tree's own `cli.py`, TensorFlow printing at start), the launcher runs the real
interpreter instead. The programs a warm program starts as `[sys.executable, ...]` (train's
export, a benchmark's runs and servers) start warm the same way, unless their environment has
TFATTN_WARM_START=0 (a benchmark that reads its child's own rusage: the launcher's is not the
program's).

What a warm start does not give a program, so tests of it use `sys.executable`: its own
`import tensorflow` (tests of what a program imports, or prints while TensorFlow starts) and its
own hash seed (children share the server's, so two runs compared for equal output are started
cold when set or dict order could be the difference).
"""

import atexit
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time

TESTS = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(TESTS)
_SERVER = os.path.join(TESTS, "warm_start_server.py")
_LAUNCHER = os.path.join(TESTS, "warm_start_launcher.py")

_started = {}  # "socket", "cpu_file", "process" of this test process's server
_starting = threading.Lock()  # tests call python() from several threads at once
# The temporary folder as the test process started: the server's outlives any test that points
# tempfile elsewhere.
_TEMP = tempfile.gettempdir()


def environment(**extra):
  """The environment the server starts in, and so the one a warm start needs: the test
  process's, with the repository on PYTHONPATH, TensorFlow's C++ log at warnings and above,
  and no GPU (CLI tests run on the CPU: see conftest's TF32 note); no TF_CONFIG."""
  env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
  env.pop("TF_CONFIG", None)
  env.update(extra)
  return env


def python():
  """The command that stands for `python` (sys.executable) in a test's program command
  (TFATTN_WARM_START=0: sys.executable itself, to compare or to rule the warm start out)."""
  if os.environ.get("TFATTN_WARM_START") == "0":
    return [sys.executable]
  with _starting:
    if "socket" not in _started:
      _start_server()
  return launcher_command(_started["socket"])


def launcher_command(socket_path):
  """`python` as the launcher of the server listening at `socket_path` (`-S -E`: milliseconds)."""
  return [sys.executable, "-S", "-E", _LAUNCHER, socket_path]


def _start_server():
  directory = tempfile.mkdtemp(prefix="tfattn-warm-start-", dir=_TEMP)
  socket_path = os.path.join(directory, "socket")
  cpu_file = os.path.join(directory, "cpu_seconds")
  with open(os.path.join(directory, "server.log"), "wb") as log:
    process = subprocess.Popen(
      [sys.executable, _SERVER, socket_path, cpu_file],
      cwd=REPO,
      env=environment(),
      stdin=subprocess.PIPE,  # its lifeline: it ends when this process does
      stdout=log,
      stderr=log,
      start_new_session=True,  # a terminal's Ctrl-C reaches programs through their launchers only
    )
  deadline = time.monotonic() + 30
  while not os.path.exists(socket_path):  # bound before it imports TensorFlow: milliseconds
    if process.poll() is not None or time.monotonic() > deadline:
      break  # no server: every launcher runs the real interpreter
    time.sleep(0.01)
  _started.update(socket=socket_path, cpu_file=cpu_file, process=process)
  atexit.register(_stop_server, process, directory)


def _stop_server(process, directory):
  """At the test process's exit: ends the server (EOF on its lifeline; it kills what still
  runs) and removes its folder (socket, log, CPU file)."""
  process.stdin.close()
  try:
    process.wait(timeout=30)
  except subprocess.TimeoutExpired:
    process.kill()
    process.wait()
  shutil.rmtree(directory, ignore_errors=True)


def process_cpu_seconds():
  """This process's CPU seconds and those of the children it has reaped (getrusage:
  microseconds, where os.times counts 10 ms ticks and a quick test's could be 0)."""
  return sum(
    usage.ru_utime + usage.ru_stime
    for usage in (
      resource.getrusage(resource.RUSAGE_SELF),
      resource.getrusage(resource.RUSAGE_CHILDREN),
    )
  )


def cpu_seconds():
  """CPU seconds of this test process's server and of the programs it has run and reaped (they
  are its children, not the test process's: file_durations adds them)."""
  path = _started.get("cpu_file")
  if not path or not os.path.exists(path):
    return 0.0
  with open(path) as f:
    return float(f.read() or 0)
