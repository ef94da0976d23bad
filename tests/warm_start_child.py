"""What `python -m MODULE`, `python -c CODE` and `python SCRIPT.py` do once the interpreter has
started, for a child of warm_start_server.py: run the program as `__main__` with python's
sys.argv and sys.path[0], then end as python ends (SystemExit's status, a traceback and 1 on an
uncaught exception, death by SIGINT on an uncaught KeyboardInterrupt, non-daemon threads joined,
atexit handlers run, output flushed)."""

import atexit
import contextlib
import os
import runpy
import signal
import subprocess
import sys
import threading
import types


def _run(args):
  if args[0] == "-m":
    sys.argv = ["-m", *args[2:]]
    sys.path[0] = os.getcwd()
    runpy.run_module(args[1], run_name="__main__", alter_sys=True)
  elif args[0] == "-c":
    sys.argv = ["-c", *args[2:]]
    sys.path[0] = ""
    main = types.ModuleType("__main__")
    main.__builtins__ = __builtins__
    sys.modules["__main__"] = main
    exec(compile(args[1], "<string>", "exec"), main.__dict__)
  else:
    sys.argv = list(args)
    sys.path[0] = os.path.dirname(os.path.realpath(args[0]))
    runpy.run_path(args[0], run_name="__main__")


def _status(code):
  if code is None:
    return 0
  if isinstance(code, int):
    return code
  print(code, file=sys.stderr)  # sys.exit("message")
  return 1


def _print_exception():
  """The traceback python prints: from the program's frames, without this module's or runpy's."""
  kind, error, frames = sys.exc_info()
  ours = (os.path.abspath(__file__), runpy.__file__, "<frozen runpy>")
  while frames is not None and frames.tb_frame.f_code.co_filename in ours:
    frames = frames.tb_next
  sys.excepthook(kind, error, frames)


def _start_programs_warm(python):
  """The programs this one starts as `[sys.executable, ...]` (train's export, a benchmark's
  runs and servers) start warm too: `python` takes sys.executable's place in their command."""
  original = subprocess.Popen.__init__

  def __init__(self, args, *more, **options):
    python_command = isinstance(args, (list, tuple)) and args and args[0] == sys.executable
    if python_command and options.get("executable") is None:
      args = [*python, *args[1:]]
    original(self, args, *more, **options)

  subprocess.Popen.__init__ = __init__


def run_as_main(args, python):
  """Runs `python ARGS` in this process and ends it; the programs it starts with
  sys.executable run as `PYTHON ARGS` (the warm launcher)."""
  _start_programs_warm(python)
  interrupted = False
  try:
    _run(args)
    status = 0
  except SystemExit as done:
    status = _status(done.code)
  except KeyboardInterrupt:
    _print_exception()
    interrupted, status = True, 130
  except BaseException:
    _print_exception()
    status = 1
  try:
    threading._shutdown()  # python joins non-daemon threads before it exits
    atexit._run_exitfuncs()
  finally:
    for stream in (sys.stdout, sys.stderr):
      with contextlib.suppress(OSError, ValueError):  # a closed pipe
        stream.flush()
    if interrupted:  # python dies by the signal, so its parent sees -SIGINT
      signal.signal(signal.SIGINT, signal.SIG_DFL)
      os.kill(os.getpid(), signal.SIGINT)
    os._exit(status)
