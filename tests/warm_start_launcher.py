"""The process a test starts in place of `python` (`warm_start.python()`; `python -S -E`,
so it costs milliseconds): it hands its stdin/stdout/stderr, working directory, environment and
python arguments to warm_start_server.py, which forks the program, then stands in for it. It
forwards the signals a test sends (SIGINT, SIGTERM, ...) and exits as the program exited (the
same status, or killed by the same signal). If the server is not there or cannot fork this
command, it runs the real interpreter in its place (exec): the test sees python either way.

    python -S -E tests/warm_start_launcher.py SOCKET ARGS...   (ARGS: what follows `python`)
"""

import contextlib
import json
import os
import signal
import socket
import sys

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1)


def _real_python(args, pending):
  """Runs python itself in this process. A signal that came before it would have reached
  python during its start: this process dies of it instead."""
  for signum in FORWARDED:
    signal.signal(signum, signal.SIG_DFL)
  for signum in pending:
    os.kill(os.getpid(), signum)
  os.execv(sys.executable, [sys.executable, *args])


def _die_as(status):
  """Ends as the program ended: its exit status, or killed by the same signal."""
  if status < 0:
    with contextlib.suppress(OSError):  # SIGKILL and SIGSTOP keep their default
      signal.signal(-status, signal.SIG_DFL)
    os.kill(os.getpid(), -status)
  os._exit(status)


def main():
  path, args = sys.argv[1], sys.argv[2:]
  program = None  # the program's pidfd: signals reach it, never a later process with its pid
  pending = []

  def forward(signum, _frame):
    if program is None:
      pending.append(signum)
    else:
      with contextlib.suppress(ProcessLookupError):  # it has just ended
        signal.pidfd_send_signal(program, signum)

  for signum in FORWARDED:
    signal.signal(signum, forward)
  server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
  try:
    server.connect(path)
  except OSError:
    _real_python(args, pending)
  body = json.dumps({"args": args, "cwd": os.getcwd(), "env": dict(os.environ)}).encode()
  socket.send_fds(server, [len(body).to_bytes(8, "big")], [0, 1, 2])
  server.sendall(body)
  received, fds, _, _ = socket.recv_fds(server, 4096, 1)
  if not fds:  # "exec" (or no answer): the real interpreter runs it
    server.close()
    _real_python(args, pending)
  program = fds[0]
  # The test's stdin/stdout/stderr are the program's now: this process lets go of them, so
  # the test sees their ends when the program's end.
  null = os.open(os.devnull, os.O_RDWR)
  for fd in (0, 1, 2):
    os.dup2(null, fd)
  for signum in pending:
    with contextlib.suppress(ProcessLookupError):
      signal.pidfd_send_signal(program, signum)
  while b"exit " not in received:
    more = server.recv(4096)
    if not more:
      break
    received += more
  _, found, status = received.decode().partition("exit ")
  _die_as(int(status.split()[0]) if found and status.split() else 1)


if __name__ == "__main__":
  main()
