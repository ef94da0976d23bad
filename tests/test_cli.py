"""cli.py's run: a program ends when its main is done, its output flushed and its status kept,
without waiting for the interpreter's teardown (`python -m train` stayed alive 28-51 s after
printing its results in it)."""

import subprocess
import sys
import textwrap
import time

from train_helpers import REPO, environment

# A main that leaves work for the teardown: a thread the interpreter would join at exit.
_PROGRAM = textwrap.dedent("""
    import sys, threading, time
    import cli

    def main(argv):
      del argv
      threading.Thread(target=time.sleep, args=(60,)).start()  # not a daemon: joined at exit
      print("the results")
      if "--fail" in sys.argv[1:]:
        raise cli.RunError("failed as asked")
      return 3 if "--three" in sys.argv[1:] else None

    cli.run(main)
""")


def test_a_program_ends_when_its_main_is_done_with_its_output_and_status(tmp_path):
  program = tmp_path / "program.py"
  program.write_text(_PROGRAM)
  for flags, status, error in (
    ([], 0, ""),
    (["--undefok=three", "--three"], 3, ""),
    (["--undefok=fail", "--fail"], 1, "program.py: error: failed as asked"),
  ):
    started = time.monotonic()
    done = subprocess.run(
      [sys.executable, str(program), *flags],
      cwd=REPO,
      env=environment(),
      capture_output=True,
      text=True,
      timeout=50,  # the thread sleeps 60 s: waiting for it fails here
    )
    assert time.monotonic() - started < 30
    assert (done.returncode, done.stdout) == (status, "the results\n"), done.stderr
    assert done.stderr.strip() == error
