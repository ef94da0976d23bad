"""Starts `python -m serving.server` as a child process and waits until it listens: the one
launcher of serving.tools.demo, the tests and the benchmarks (a server of its own process, as a user
runs it: its own GIL, signals and exit status)."""

import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

Ports = collections.namedtuple("Ports", ["rest", "grpc"])
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class _LogTail:
  """Drains a child's output pipe (an unread pipe would stall a chatty server) and keeps the
  last lines for error messages."""

  def __init__(self, pipe, lines=60):
    self._lines = collections.deque(maxlen=lines)
    self._thread = threading.Thread(target=self._drain, args=(pipe,), daemon=True)
    self._thread.start()

  def _drain(self, pipe):
    for line in iter(pipe.readline, b""):
      self._lines.append(line.decode("utf-8", "replace"))
    pipe.close()

  def text(self):
    self._thread.join(timeout=2)
    return "".join(self._lines)


def server_command(
  model_name=None,
  model_base_path=None,
  rest_port=0,
  grpc_port=0,
  port_file=None,
  extra_flags=(),
  python=None,
):
  """The command line of a server on the given ports (0: free ones); with no model, the
  models come from a --model_config_file in extra_flags. `python`: the interpreter's command
  (a list; this one's, sys.executable, by default)."""
  command = [*(python or [sys.executable]), "-m", "serving.server", f"--rest_api_port={rest_port}"]
  if grpc_port is not None:  # None: a server from before gRPC (benchmarks' old trees)
    command.append(f"--port={grpc_port}")
  if model_name is not None:
    command.append(f"--model_name={model_name}")
  if model_base_path is not None:
    command.append(f"--model_base_path={model_base_path}")
  if port_file is not None:
    command.append(f"--port_file={port_file}")
  return command + list(extra_flags)


def start_subprocess(
  model_name=None,
  model_base_path=None,
  rest_port=0,
  grpc_port=0,
  extra_flags=(),
  timeout=180,
  cwd=REPO_ROOT,
  env=None,
  python=None,
):
  """Starts a server child; returns (process, Ports(rest, grpc)) once both ports listen. The
  tail of its log is in the RuntimeError raised if it exits or does not start in time (with
  the exit status as `returncode`: 2 is the user's mistake, see cli.py), and in
  `process.log_tail()`. Leaves no files behind."""
  work_dir = tempfile.mkdtemp(prefix="tfattn-server-")
  port_file = os.path.join(work_dir, "ports.json")
  try:
    process = subprocess.Popen(
      server_command(
        model_name, model_base_path, rest_port, grpc_port, port_file, extra_flags, python
      ),
      cwd=cwd,
      env=env,
      stdout=subprocess.PIPE,
      stderr=subprocess.STDOUT,
    )
    process.log_tail = _LogTail(process.stdout).text
    deadline = time.time() + timeout
    while not os.path.exists(port_file):
      if process.poll() is not None or time.time() > deadline:
        process.kill()
        process.wait()
        error = RuntimeError(
          f"the server did not start (exit status {process.returncode}):"
          f"\n{process.log_tail()[-3000:]}"
        )
        error.returncode = process.returncode
        raise error
      time.sleep(0.1)
    with open(port_file) as f:
      ports = json.load(f)
    if isinstance(ports, int):  # a server from before gRPC wrote its REST port alone
      return process, Ports(ports, None)
    return process, Ports(ports["rest_api_port"], ports["port"])
  finally:
    shutil.rmtree(work_dir, ignore_errors=True)


def stop(process, timeout=30):
  """SIGTERM (requests in flight finish), then the exit status; killed if it hangs."""
  process.terminate()
  try:
    return process.wait(timeout=timeout)
  except subprocess.TimeoutExpired:
    process.kill()
    return process.wait()
