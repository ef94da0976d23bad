"""A warm start for the programs the tests run: one process per test process imports
TensorFlow once (`cli.start_tensorflow_quietly`, 3-4 CPU s; then PRELOADED, the other projects'
libraries the programs import), then forks a child for each
`python -m PROGRAM ...` a test starts through `warm_start.python()`. The child takes the test's
stdin/stdout/stderr, working directory, environment and arguments, and runs the program as
`python` would (`__main__`, sys.argv, sys.path[0], exit status, atexit). See warm_start.py.

It forks only when a real start would have left the process in the state it forks from: the
request's import-time environment (TF_*, XLA_*, PYTHON*, locale, TMPDIR, HOME: see
IMPORT_TIME_PREFIXES) equals its own, the command is `-m MODULE`, `-c CODE` or `SCRIPT.py`
without interpreter options, and TensorFlow's start printed nothing. Otherwise it answers
"exec" and the launcher runs the real interpreter.

One Python thread: it forks from it (a child starts with a consistent interpreter; the one
native thread beside it, OpenBLAS's, has its own fork handler), watches each child through a
pidfd and its launcher's connection, and SIGKILLs a child whose launcher died (a test's timeout
or SIGKILL), reaping it before it serves the next request. A launcher that dies at any moment
costs only its own program; children die with the server (PR_SET_PDEATHSIG).

    python tests/warm_start_server.py SOCKET CPU_FILE   (its stdin: the lifeline; EOF ends it)
"""

import contextlib
import gc
import importlib
import json
import os
import select
import signal
import socket
import sys
import tempfile

import warm_start
from warm_start_launcher import FORWARDED

# Environment variables read when Python, TensorFlow, Keras, NumPy or matplotlib start (or that
# `tempfile` caches): a child inherits this process's start, so they must match.
IMPORT_TIME_PREFIXES = (
  "TF_",
  "XLA_",
  "CUDA_",
  "PYTHON",
  "LD_",
  "OMP_",
  "MKL",
  "KMP_",
  "OPENBLAS",
  "KERAS",
  "MPL",
  "HOME",
  "LANG",
  "LC_",
  "TZ",
  "TMPDIR",
  "TEMP",
  "TMP",
  "XDG_",  # matplotlib's config and cache folders
  "PROTOCOL_BUFFERS",
  "NPY_",
  "NUMPY_",
  "GOTO_",
  "MALLOC_",
  "GLIBC_",
  "SACREBLEU",
)
# Other projects' libraries the programs import after TensorFlow, imported once here too
# (~0.5 CPU s a program, most of it TF-Text's op libraries): never a module of ours, which each
# program imports in its child as python would. A program that forgot to import TF-Text before
# loading an export would pass warm: the cold starts (the server's command-line tests, the
# export's "process without tfattn", the user-mistake runs) keep that honest.
PRELOADED = ("tensorflow_text", "sacrebleu", "sentencepiece", "tensorboard.summary")
# The signals a launcher forwards (FORWARDED) are blocked from the fork until the child runs its
# program, so that none lands in this module's code in the child.
# Read when a program runs, not when TensorFlow starts (MultiWorkerMirroredStrategy's cluster).
RUNTIME_VARIABLES = {"TF_CONFIG"}


def import_time_environment(environment):
  return {
    key: value
    for key, value in environment.items()
    if key.startswith(IMPORT_TIME_PREFIXES) and key not in RUNTIME_VARIABLES
  }


def supported(args, cwd):
  """`-m MODULE ...`, `-c CODE ...` or `SCRIPT.py ...` (the forms a child can run as python),
  unless the folder python would put first on sys.path has its own `cli.py` or `settings.py`
  (an older tree: this process has already imported the repository's)."""
  if len(args) >= 2 and args[0] in ("-m", "-c"):
    first = cwd if args[0] == "-m" else None
  elif args and not args[0].startswith("-") and args[0].endswith(".py"):
    first = os.path.dirname(os.path.realpath(os.path.join(cwd, args[0])))
  else:
    return False
  if first is None or os.path.realpath(first) == os.path.realpath(warm_start.REPO):
    return True
  return not any(os.path.exists(os.path.join(first, name)) for name in ("cli.py", "settings.py"))


def _start_tensorflow():
  """`cli.start_tensorflow_quietly()`, then PRELOADED, with stderr captured: True if they
  printed nothing."""
  sys.stderr.flush()
  saved = os.dup(2)
  with tempfile.TemporaryFile() as captured:
    os.dup2(captured.fileno(), 2)
    try:
      import cli

      cli.start_tensorflow_quietly()
      for name in PRELOADED:
        importlib.import_module(name)
    finally:
      sys.stderr.flush()
      os.dup2(saved, 2)
      os.close(saved)
    captured.seek(0)
    printed = captured.read()
  return not printed.strip()


def _receive(connection):
  """(request, [stdin, stdout, stderr] fds) sent by warm_start_launcher.py; the fds are closed
  if the request is cut short or malformed."""
  connection.settimeout(30)  # a stalled launcher must not hold up the others
  header, fds, _, _ = socket.recv_fds(connection, 8, 3)
  try:
    if len(header) < 8 or len(fds) != 3:
      raise ConnectionError("short header")
    size = int.from_bytes(header, "big")
    body = b""
    while len(body) < size:
      chunk = connection.recv(size - len(body))
      if not chunk:
        raise ConnectionError("short request")
      body += chunk
    request = json.loads(body)
  except BaseException:
    for fd in fds:
      os.close(fd)
    raise
  connection.settimeout(None)
  return request, fds


def _run_child(request, fds, own_fds, socket_path):
  """In the forked child (FORWARDED signals blocked): becomes the program, never returns."""
  try:
    _die_with_parent()
    for fd in own_fds:
      os.close(fd)
    for target, fd in enumerate(fds):
      os.dup2(fd, target)
    for fd in fds:
      if fd > 2:
        os.close(fd)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for signum in FORWARDED[1:]:
      signal.signal(signum, signal.SIG_DFL)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    import warm_start_child

    python = warm_start.launcher_command(socket_path)
  except BaseException as error:  # never back into the server's loop
    with contextlib.suppress(BaseException):
      os.write(2, f"warm start: {type(error).__name__}: {error}\n".encode())
    os._exit(1)
  warm_start_child.run_as_main(request["args"], python, unblock=FORWARDED)


def _die_with_parent():
  """PR_SET_PDEATHSIG: the kernel SIGKILLs this child if the server dies first."""
  import ctypes

  libc = ctypes.CDLL(None, use_errno=True)
  libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG = 1


def write_cpu_seconds(path):
  """This process's CPU seconds and its reaped programs', for the tests' CPU accounting."""
  with open(path + ".tmp", "w") as f:
    f.write(f"{warm_start.process_cpu_seconds():.3f}\n")
  os.replace(path + ".tmp", path)


def _alive(connection):
  """Whether a launcher's connection is still open (it sends nothing after its request)."""
  try:
    return bool(connection.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT))
  except BlockingIOError:
    return True
  except OSError:  # ECONNRESET: it died with our "pid" line unread
    return False


class _Child:
  def __init__(self, pid, connection):
    self.pid = pid
    self.connection = connection
    self.pidfd = os.pidfd_open(pid)


def serve(path, cpu_file):
  listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
  listener.bind(path)
  listener.listen(64)
  warm = _start_tensorflow()
  # What TensorFlow's import left is never garbage: out of the collector's sight, a child's
  # collections (and the one at its exit) skip it, and do not copy its pages on write
  # (a tiny warm train run: 4.56 -> 4.30 CPU s, 12 runs each).
  gc.freeze()
  own_environment = import_time_environment(os.environ)
  children = {}  # fd (pidfd or connection) -> _Child
  write_cpu_seconds(cpu_file)

  def reap(child, kill):
    if kill:
      os.kill(child.pid, signal.SIGKILL)  # a zombie takes it harmlessly
    _, status = os.waitpid(child.pid, 0)
    write_cpu_seconds(cpu_file)
    if not kill:
      with contextlib.suppress(OSError):  # its launcher is gone
        child.connection.sendall(f"exit {os.waitstatus_to_exitcode(status)}\n".encode())
    del children[child.pidfd], children[child.connection.fileno()]
    os.close(child.pidfd)
    child.connection.close()

  while True:
    readable, _, _ = select.select([0, listener, *children], [], [])
    if 0 in readable and not os.read(0, 1):  # the test process is gone
      for child in set(children.values()):
        reap(child, kill=True)
      return
    # Exits and dead launchers first: a killed program is gone before the next one starts.
    for fd in readable:
      child = children.get(fd)
      if child is None:
        continue
      if fd == child.pidfd:
        reap(child, kill=False)
      elif not _alive(child.connection):  # its launcher died
        reap(child, kill=True)
    if listener not in readable:
      continue
    connection, _ = listener.accept()
    try:
      request, fds = _receive(connection)
    except (ConnectionError, OSError, ValueError):
      connection.close()
      continue
    if not (
      warm
      and supported(request["args"], request["cwd"])
      and import_time_environment(request["env"]) == own_environment
    ):
      for fd in fds:
        os.close(fd)
      with contextlib.suppress(OSError):  # its launcher is gone
        connection.sendall(b"exec\n")
      connection.close()
      continue
    sys.stdout.flush()
    sys.stderr.flush()
    own_fds = [listener.fileno(), connection.fileno(), *children]
    signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
    pid = os.fork()
    if pid == 0:
      _run_child(request, fds, own_fds, path)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)
    for fd in fds:
      os.close(fd)
    child = _Child(pid, connection)
    children[child.pidfd] = children[connection.fileno()] = child
    try:  # the pidfd too: the launcher signals the program through it
      socket.send_fds(connection, [f"pid {pid}\n".encode()], [child.pidfd])
    except OSError:  # its launcher died before it learned the pid
      reap(child, kill=True)


if __name__ == "__main__":
  signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the programs' to take
  serve(sys.argv[1], sys.argv[2])
