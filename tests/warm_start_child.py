"""What `python -m MODULE`, `python -c CODE` and `python SCRIPT.py` do once the interpreter has
started, for a child of warm_start_server.py: run the program in a fresh `__main__` with
python's sys.argv and sys.path[0] (`-m` through runpy's `_run_module_as_main`, as python does),
then end as python ends: SystemExit's status, a traceback and 1 on an uncaught exception, death
by SIGINT on an uncaught KeyboardInterrupt, non-daemon threads joined, atexit handlers run,
sys.stdout and sys.stderr flushed (120 if that fails), a last garbage collection. What is not
the same: C-level finalization (static destructors, C stdio buffers) does not run, and a
traceback starts at the program's first frame (python's for `-m` also shows runpy's two)."""

import atexit
import builtins
import contextlib
import gc
import os
import runpy
import signal
import subprocess
import sys
import threading
import types

# Popen options under which the launcher could not stand in for python: the program's command
# then runs as it is (cold).
_OPTIONS_FOR_THE_REAL_PROCESS = (
  "shell",
  "executable",
  "pass_fds",
  "preexec_fn",
  "start_new_session",
  "process_group",
  "user",
  "group",
  "extra_groups",
  "umask",
)


def _fresh_main():
  main = types.ModuleType("__main__")
  main.__builtins__ = builtins
  sys.modules["__main__"] = main
  return main


def _run(args):
  if args[0] == "-m":
    sys.argv = ["-m", *args[2:]]
    sys.path[0] = os.getcwd()
    _fresh_main()
    runpy._run_module_as_main(args[1])  # what `python -m` calls: argv[0] and __main__ stay set
  elif args[0] == "-c":
    sys.argv = ["-c", *args[2:]]
    sys.path[0] = ""
    exec(compile(args[1], "<string>", "exec"), _fresh_main().__dict__)
  else:
    path = args[0]
    sys.argv = list(args)
    sys.path[0] = os.path.dirname(os.path.realpath(path))
    try:
      with open(path, "rb") as f:
        source = f.read()
    except OSError as error:
      print(f"{sys.executable}: can't open file {path!r}: {error}", file=sys.stderr)
      raise SystemExit(2) from None
    main = _fresh_main()
    main.__file__ = path
    try:
      exec(compile(source, path, "exec"), main.__dict__)
    except SystemExit:
      raise
    except BaseException:
      del main.__file__  # python's PyRun_SimpleFile takes it back after an uncaught error
      raise


def _status(code):
  if code is None:
    return 0
  if isinstance(code, int):
    return code
  print(code, file=sys.stderr)  # sys.exit("message")
  return 1


def _print_exception():
  """The traceback from the program's frames, without this module's or runpy's."""
  kind, error, frames = sys.exc_info()
  ours = (os.path.abspath(__file__), runpy.__file__, "<frozen runpy>")
  while frames is not None and frames.tb_frame.f_code.co_filename in ours:
    frames = frames.tb_next
  sys.excepthook(kind, error, frames)


def _start_programs_warm(python):
  """The programs this one starts as `[sys.executable, ...]` (train's export, a benchmark's
  runs and servers) start warm too: `python` takes sys.executable's place in their command,
  unless an option needs the real process (see above) or their environment says
  TFATTN_WARM_START=0 (a benchmark that measures its child's own memory)."""
  original = subprocess.Popen.__init__

  def __init__(self, args, *more, **options):
    python_command = isinstance(args, (list, tuple)) and args and args[0] == sys.executable
    real_process = (
      more  # positional options (bufsize, executable, ...)
      or any(options.get(name) for name in _OPTIONS_FOR_THE_REAL_PROCESS)
      or options.get("close_fds") is False
      or (options.get("env") or os.environ).get("TFATTN_WARM_START") == "0"
    )
    if python_command and not real_process:
      args = [*python, *args[1:]]
    original(self, args, *more, **options)

  subprocess.Popen.__init__ = __init__


def run_as_main(args, python, unblock=()):
  """Runs `python ARGS` in this process and ends it; the programs it starts with
  sys.executable run as `PYTHON ARGS` (the warm launcher). `unblock`: the signals the server
  blocked across the fork, delivered from here on."""
  _start_programs_warm(python)
  interrupted = False
  try:
    signal.pthread_sigmask(signal.SIG_UNBLOCK, unblock)
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
  except BaseException:
    _print_exception()
  try:
    atexit._run_exitfuncs()
    gc.collect()
  finally:
    for stream in (sys.stdout, sys.stderr):
      try:
        stream.flush()
      except (OSError, ValueError):
        status = status or 120  # python's status when it cannot flush at exit
    if interrupted:  # python dies by the signal, so its parent sees -SIGINT
      signal.signal(signal.SIGINT, signal.SIG_DFL)
      os.kill(os.getpid(), signal.SIGINT)
    with contextlib.suppress(OverflowError):
      os._exit(status)
    os._exit(1)
