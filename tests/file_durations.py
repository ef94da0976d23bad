"""Each test file's CPU seconds, measured by the suite itself, so the files `make test` hands out
first (tests/conftest.py) come from a measurement a command regenerates, not from comments.

  make test-durations      # the whole suite as `make test` runs it, then tests/durations.json

While recording (TFATTN_DURATIONS_OUT set), every test process adds up, per test file, the CPU
seconds of its own process and of the programs it waited for (`os.times`: user + system, the
children's included) over each test's setup, call and teardown, and writes them beside
TFATTN_DURATIONS_OUT at its end; `python tests/file_durations.py --merge DIR` sums the
processes' files into tests/durations.json."""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DURATIONS = os.path.join(HERE, "durations.json")
OUT_VARIABLE = "TFATTN_DURATIONS_OUT"


def cpu_seconds() -> float:
  times = os.times()
  return times.user + times.system + times.children_user + times.children_system


def load(path: str = DURATIONS) -> dict:
  """{test file relative to tests/: CPU seconds} of the last recording ({} without one)."""
  if not os.path.exists(path):
    return {}
  with open(path) as f:
    return json.load(f)["files"]


def write_part(out_dir: str, worker: str, seconds: dict) -> None:
  os.makedirs(out_dir, exist_ok=True)
  with open(os.path.join(out_dir, f"part-{worker}.json"), "w") as f:
    json.dump(seconds, f)


def merge(out_dir: str, target: str = DURATIONS) -> dict:
  """Sums every part in `out_dir` into `target` (tests/durations.json); returns the files'
  seconds, longest first."""
  files = {}
  for name in sorted(os.listdir(out_dir)):
    if name.startswith("part-") and name.endswith(".json"):
      with open(os.path.join(out_dir, name)) as f:
        for path, seconds in json.load(f).items():
          files[path] = files.get(path, 0.0) + seconds
  ordered = dict(sorted(((p, round(s, 1)) for p, s in files.items()), key=lambda x: -x[1]))
  record = {
    "what": "CPU seconds of each test file in one `make test-durations` run (the test process's "
    "and the programs it waited for); tests/conftest.py hands the longest out first",
    "machine": os.uname().machine + ", " + str(os.cpu_count()) + " cores",
    "files": ordered,
  }
  temp = target + ".tmp"
  with open(temp, "w") as f:
    json.dump(record, f, indent=1)
    f.write("\n")
  os.replace(temp, target)
  return ordered


if __name__ == "__main__":
  if len(sys.argv) != 3 or sys.argv[1] != "--merge":
    sys.exit("usage: python tests/file_durations.py --merge DIR")
  merged = merge(sys.argv[2])
  print(f"wrote {DURATIONS}: {len(merged)} files, {sum(merged.values()):.0f} CPU s in all")
