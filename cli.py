"""The shell every command-line program shares: absl flags, `--help`, one-line errors, a quiet
TensorFlow start. It imports only `settings.py` (declared settings, no TensorFlow), so
`train/`, `serving/` (the server included, which imports nothing of `tfattn`) and the
benchmarks all declare their flags one way: a dataclass of `settings.setting` fields, made into
flags by `define_flags` and checked against their bounds by `run` before `main` starts.

Exit statuses: 0 done; 2 a mistake the user can fix (bad flag value, missing input, busy port),
told in one line on stderr that names the problem and the fix; 1 a failure at run time, also one
line (`--verbose_errors` adds the traceback); 130 interrupted. The process ends when main
returns (`_exit_now`): no interpreter teardown, no atexit handler after it.

    import cli
    cli.start_tensorflow_quietly()      # before anything imports TensorFlow
    ...
    if __name__ == "__main__":
      cli.run(main)

A script that imports TensorFlow at its top defines its flags and calls `check_flags_now()`
above that import, so a mistake costs no TensorFlow start there either.
"""

import contextlib
import logging
import os
import re
import sys
import tempfile
import traceback

from absl import app, flags

import settings

flags.DEFINE_bool(
  "verbose_errors", False, "On an error, print the Python traceback after the one-line message."
)


class UsageError(Exception):
  """A mistake the user can fix before anything runs: exit status 2."""


class RunError(Exception):
  """A failure while running, with a message that says what to do: exit status 1 (or the
  `status` a program must match, e.g. the server's 255, TF Serving's `return -1`)."""

  def __init__(self, message, status: int = 1):
    super().__init__(message)
    self.status = status


def program_name() -> str:
  """`python -m serving.export` -> "serving.export"; a script -> its file name."""
  main = sys.modules.get("__main__")
  spec = getattr(main, "__spec__", None)
  if spec is not None and spec.name:
    return spec.name[: -len(".__main__")] if spec.name.endswith(".__main__") else spec.name
  return os.path.basename(sys.argv[0]) or "tfattn"


def fail(message: str, status: int = 2) -> None:
  """Prints `<program>: error: <message>` as one line on stderr and exits with `status`."""
  one_line = " ".join(str(message).split())
  print(f"{program_name()}: error: {one_line}", file=sys.stderr, flush=True)
  sys.exit(status)


_HELP_FLAGS = ("--help", "-help", "-h", "-?", "--helpshort", "--helpfull", "--helpxml")


def _parse_flags(argv):
  try:
    return flags.FLAGS(argv)
  except flags.Error as error:
    fail(f"{error} (see --help)")
  except SystemExit as done:
    # absl prints the help asked for, then exits 1; asking for help is not an error.
    if done.code == 1 and any(arg in _HELP_FLAGS for arg in argv[1:]):
      sys.exit(0)
    raise


def run(main, arguments: str = "") -> None:
  """`absl.app.run(main)` with our error contract (see the module docstring). A program that
  takes positional arguments names them in `arguments` (e.g. "DIR"); others refuse any."""

  def guarded(argv):
    try:
      _guarded(argv)
    except SystemExit as done:  # main's status, or fail()'s
      _exit_now(done.code)

  def _guarded(argv):
    if len(argv) > 1 and not arguments:
      _refuse_arguments(argv)
    try:
      _check_declared()
      sys.exit(main(argv))
    except UsageError as error:
      _maybe_traceback()
      fail(str(error), 2)
    except RunError as error:
      _maybe_traceback()
      fail(str(error), error.status)
    except KeyboardInterrupt:
      fail("interrupted", 130)
    except Exception as error:
      _maybe_traceback()
      hint = "" if flags.FLAGS["verbose_errors"].value else " (--verbose_errors shows where)"
      fail(f"{type(error).__name__}: {error}{hint}", 1)

  # --help lists the main module's flags; ours belongs there too.
  flags.FLAGS.register_key_flag_for_module(sys.argv[0], flags.FLAGS["verbose_errors"])
  app.run(guarded, flags_parser=_parse_flags)


def _refuse_arguments(argv) -> None:
  fail(f"unexpected arguments {argv[1:]}: every option is a --flag (see --help)")


def check_flags_now() -> None:
  """For a script that imports TensorFlow at the top of its file, called above that import with
  its flags defined: parses and checks them as `run` will, so a mistake is told in one line at
  once, not after TensorFlow's start (~3 CPU s). `run` parses them again; asking for help is
  left to it."""
  if any(arg in _HELP_FLAGS for arg in sys.argv[1:]):
    return
  rest = _parse_flags(sys.argv)
  if len(rest) > 1:
    _refuse_arguments(rest)
  try:
    _check_declared()
  except UsageError as error:
    fail(str(error), 2)


def _exit_now(code) -> None:
  """Ends the process once main is done: its output flushed, then `os._exit`, without the
  interpreter's teardown. That teardown (collecting every object TensorFlow made, destroying
  its runtime, joining threads) kept `python -m train` alive 28-51 s after it printed its
  results, in 3 of 13 runs of the shakespeare_char recipe on this shared machine (gdb: the
  main thread in finalize_modules' garbage collection; perf: no CPU used, waiting), and costs
  every program ~1 s. A program's work must be done (files written and closed) when its main
  returns: nothing runs after it, atexit handlers included."""
  if code is None:
    status = 0
  elif isinstance(code, int):
    status = code
  else:  # sys.exit("message"): Python prints it and exits 1
    print(code, file=sys.stderr)
    status = 1
  logging.shutdown()  # absl's and Python's log handlers flushed
  for stream in (sys.stdout, sys.stderr):
    with contextlib.suppress(OSError, ValueError):  # a closed pipe: nothing more can be said
      stream.flush()
  os._exit(status)


# (declared class, fields without a flag, FlagValues) of every define_flags call: `run` checks
# their parsed values against the declarations before `main`.
_DEFINED = []


def _check_declared() -> None:
  for declared_class, skip, parsed in _DEFINED:
    values = flag_values(declared_class, skip=skip, parsed=parsed)
    for problem in settings.problems(declared_class, values):
      raise UsageError(problem)


def define_flags(
  declared_class,
  *,
  unset: str = "",
  optional: bool = False,
  skip=(),
  flag_values=None,
  aliases=None,
) -> None:
  """One absl flag per field of a dataclass declared with `settings.setting`: its type,
  default, help, allowed values (an enum) and bounds (in the help; `settings.check` enforces
  them with one-line messages).

  Args:
    declared_class: the dataclass (e.g. `RunConfig`, `DecodeOptions`).
    unset: what a flag left unset means, for fields whose default is None (e.g. "the
      recipe's, then the task's value"), unless the field's declaration says (`unset=`);
      shown in the help with the declared `when_unset`.
    optional: every flag defaults to None ("unset": e.g. "the run's value", then the field's
      own default).
    skip: field names that get no flag.
    flag_values: where to define them (default: absl's global `flags.FLAGS`).
    aliases: {older flag name: flag} still accepted (e.g. train's --eval_file).
  """
  import dataclasses
  import typing

  define = {"flag_values": flags.FLAGS if flag_values is None else flag_values}
  hints = typing.get_type_hints(declared_class)
  for field, spec in settings.declared(declared_class):
    if field.name in skip:
      continue
    name = settings.flag_name(field)
    kind = hints[field.name]
    if typing.get_origin(kind) is typing.Union:  # Optional[X] -> X
      kind = next(arg for arg in typing.get_args(kind) if arg is not type(None))
    default = None if optional else field.default
    if isinstance(default, tuple):  # a dataclass default is immutable; absl takes a list
      default = list(default)
    if default is dataclasses.MISSING:
      raise ValueError(f"{declared_class.__name__}.{field.name} needs a default to be a flag")
    notes = [spec.range_text()] if spec.range_text() else []
    meaning = unset if spec.unset is None else spec.unset
    fallback = spec.when_unset if spec.when_unset is not None or not optional else field.default
    if default is None and meaning:
      notes.append(f"default: {meaning}" + ("" if fallback is None else f", else {fallback}"))
    help_text = spec.help + (f" ({'; '.join(notes)})" if notes else "")
    allowed = spec.allowed()
    if typing.get_origin(kind) is list:  # List[str], List[int]
      item = typing.get_args(kind)[0]
      if spec.extra.get("repeat"):  # --text=a --text=b
        define_multi = flags.DEFINE_multi_integer if item is int else flags.DEFINE_multi_string
        define_multi(name, default, help_text, **define)
      else:  # --sizes=1,2
        flags.DEFINE_list(name, default, help_text, **define)
    elif allowed is not None:
      flags.DEFINE_enum(name, default, [str(choice) for choice in allowed], help_text, **define)
    elif kind is bool:
      flags.DEFINE_bool(name, default, help_text, **define)
    elif kind is int:
      flags.DEFINE_integer(name, default, help_text, **define)
    elif kind is float:
      flags.DEFINE_float(name, default, help_text, **define)
    elif kind is str:
      flags.DEFINE_string(name, default, help_text, **define)
    else:
      raise TypeError(f"{declared_class.__name__}.{field.name}: no flag type for {kind}")
    # --help lists the main module's key flags: these belong there, not to this module.
    define["flag_values"].register_key_flag_for_module(sys.argv[0], define["flag_values"][name])
  for old, name in (aliases or {}).items():  # older names a program still accepts
    flags.DEFINE_alias(old, name, **define)
    define["flag_values"].register_key_flag_for_module(sys.argv[0], define["flag_values"][old])
  _DEFINED.append((declared_class, tuple(skip), define["flag_values"]))


def flag_values(declared_class, *, only_present: bool = False, skip=(), parsed=None) -> dict:
  """{field name: parsed flag value} for the flags `define_flags` made for `declared_class`;
  with `only_present`, just the flags given on the command line. `parsed`: the parsed
  `flags.FlagValues` (default: absl's global one)."""
  parsed, values = (flags.FLAGS if parsed is None else parsed), {}
  for field, _ in settings.declared(declared_class):
    name = settings.flag_name(field)
    if field.name in skip or (only_present and not parsed[name].present):
      continue
    values[field.name] = parsed[name].value
  return values


def _maybe_traceback():
  if flags.FLAGS.is_parsed() and flags.FLAGS.verbose_errors:
    traceback.print_exc()


# Lines TensorFlow prints while it looks for a GPU. On a machine without an NVIDIA driver they
# are noise (one even reads "E... failed call to cuInit"); with a GPU they are kept.
_NO_GPU_NOISE = (
  "Could not find cuda drivers on your machine",
  "failed call to cuInit",
  "cpu_feature_guard.cc",
  "To enable the following instructions:",
)

# A C++ log line of TensorFlow (or absl, gRPC): "I0000 00:00:1795658263.677 5480 port.cc:153] ...";
# the letter is its severity (INFO, WARNING, ERROR, FATAL = TF_CPP_MIN_LOG_LEVEL 0 to 3).
_CPP_LOG_LINE = re.compile(r"^([IWEF])\d{4} [\d:.]+ +\d+ \S+:\d+\] ")
_SEVERITY = {"I": 0, "W": 1, "E": 2, "F": 3}
# absl's notice that precedes the lines it prints before logging is set up.
_ABSL_PRE_INIT = "WARNING: All log messages before absl::InitializeLog() is called"


def _shown(line: str, min_level: int, has_gpu: bool) -> bool:
  """Whether a line TensorFlow printed while it started reaches the user. TF 2.21 prints some
  INFO lines (e.g. "oneDNN custom operations are on", on some CPUs) before absl's logging is set
  up, where TF_CPP_MIN_LOG_LEVEL does not apply: the level is applied here instead."""
  if not has_gpu and any(noise in line for noise in _NO_GPU_NOISE):
    return False
  if line.startswith(_ABSL_PRE_INIT):
    return min_level == 0
  match = _CPP_LOG_LINE.match(line)
  return match is None or _SEVERITY[match.group(1)] >= min_level


def _min_log_level() -> int:
  try:
    return int(os.environ.get("TF_CPP_MIN_LOG_LEVEL", "0"))
  except ValueError:
    return 0


def start_tensorflow_quietly() -> None:
  """Imports TensorFlow and lists its devices with stderr captured, then replays what it
  printed at or above TensorFlow's C++ log level (WARNING unless the user set
  TF_CPP_MIN_LOG_LEVEL), less the no-GPU noise above. Call before anything else imports
  TensorFlow."""
  if "tensorflow" in sys.modules:
    return
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
  sys.stderr.flush()
  saved = os.dup(2)
  with tempfile.TemporaryFile(mode="w+b") as captured:
    os.dup2(captured.fileno(), 2)
    try:
      import tensorflow as tf

      has_gpu = bool(tf.config.list_physical_devices("GPU"))
    finally:
      sys.stderr.flush()
      os.dup2(saved, 2)
      os.close(saved)
    captured.seek(0)
    text = captured.read().decode("utf-8", "replace")
  min_level = _min_log_level()
  kept = [line for line in text.splitlines() if _shown(line, min_level, has_gpu)]
  if kept:
    print("\n".join(kept), file=sys.stderr, flush=True)
  drop_log_lines(_BOOKKEEPING)


# Lines TensorFlow's Python side logs at INFO for every checkpoint or SavedModel it writes:
# bookkeeping of its own, not progress of ours.
_BOOKKEEPING = (
  "Sharding callback duration",
  "Assets written to",
  "Writing fingerprint to",
  "Fingerprint not found",
  "contains input name(s)",
)


def drop_log_lines(fragments) -> None:
  """Drops the log records of TensorFlow's Python side whose message holds one of `fragments`
  (text TensorFlow logs that is not ours to show)."""
  import logging

  fragments = tuple(fragments)

  class _Drop(logging.Filter):
    def filter(self, record):
      return not any(fragment in str(record.msg) for fragment in fragments)

  for name in ("absl", "tensorflow"):  # TensorFlow's modules log through either
    logging.getLogger(name).addFilter(_Drop())
