"""The process a test starts in place of `python` (`warm_start.PYTHON`; run with `python -S -E`,
so it costs milliseconds): it hands its stdin/stdout/stderr, working directory, environment and
python arguments to warm_start_server.py, which forks the program, then stands in for it. It
forwards the signals a test sends (SIGINT, SIGTERM, ...) and exits as the program exited (the
same status, or killed by the same signal). If the server is not there or cannot fork this
command, it runs the real interpreter in its place (exec): the test sees python either way.

    python -S -E tests/warm_start_launcher.py SOCKET ARGS...   (ARGS: what follows `python`)
"""

import json
import os
import signal
import socket
import sys

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1)


def _real_python(args):
  os.execv(sys.executable, [sys.executable, *args])


def main():
  path, args = sys.argv[1], sys.argv[2:]
  pid = None
  pending = []

  def forward(signum, _frame):
    if pid is None:
      pending.append(signum)
    else:
      os.kill(pid, signum)

  for signum in FORWARDED:
    signal.signal(signum, forward)
  server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
  try:
    server.connect(path)
  except OSError:
    _real_python(args)
  body = json.dumps({"args": args, "cwd": os.getcwd(), "env": dict(os.environ)}).encode()
  socket.send_fds(server, [len(body).to_bytes(8, "big")], [0, 1, 2])
  server.sendall(body)
  replies = server.makefile("r")
  first = replies.readline().split()
  if len(first) != 2 or first[0] != "pid":  # "exec": run it in the real interpreter
    server.close()
    if pending:  # a signal came before the program existed: python would have died of it
      signal.signal(pending[0], signal.SIG_DFL)
      os.kill(os.getpid(), pending[0])
    _real_python(args)
  pid = int(first[1])
  for signum in pending:
    os.kill(pid, signum)
  last = replies.readline().split()
  status = int(last[1]) if len(last) == 2 and last[0] == "exit" else 1
  if status < 0:  # killed by a signal: so is this process, so its parent sees the same
    signal.signal(-status, signal.SIG_DFL)
    os.kill(os.getpid(), -status)
  os._exit(status)


if __name__ == "__main__":
  main()
