"""cli.py's run: a program's objects are frozen when its main is done, so the interpreter's
last garbage collections do not walk them (`python -m train` stayed alive 36 s after its
results in that walk)."""

import subprocess
import sys
import textwrap

from train_helpers import REPO, environment

_PROGRAM = textwrap.dedent("""
    import atexit, gc, sys
    import cli

    def main(argv):
      del argv
      sys.leftover = [[i] for i in range(1000)]  # objects the collector would walk at exit
      if "--fail" in sys.argv[1:]:
        raise cli.RunError("failed as asked")

    atexit.register(lambda: print("frozen", gc.get_freeze_count() > 0, flush=True))
    cli.run(main)
""")


def test_a_programs_objects_are_frozen_when_its_main_is_done_or_fails(tmp_path):
  program = tmp_path / "program.py"
  program.write_text(_PROGRAM)
  for flags, status in (([], 0), (["--undefok=fail", "--fail"], 1)):
    done = subprocess.run(
      [sys.executable, str(program), *flags],
      cwd=REPO,
      env=environment(),
      capture_output=True,
      text=True,
      timeout=60,
    )
    assert done.returncode == status, done.stderr
    assert done.stdout.splitlines() == ["frozen True"], done.stdout
