"""Each test file's CPU seconds, measured by the suite itself, so the files `make test` hands out
first (tests/conftest.py) come from a measurement a command regenerates, not from comments;
and the tests not marked slow that took half a CPU second or more (`FAST_TEST_LIMIT`), which
the conftest marks slow so that `make test-fast` stays a quick loop.

  make test-durations      # the whole suite as `make test` runs it, then tests/durations.json
  python tests/file_durations.py --by_product [FILE]   # its CPU seconds by product, a table

While recording (TFATTN_DURATIONS_OUT set), every test process adds up, per test file, the CPU
seconds of its own process, of the programs it waited for (`getrusage`: user + system, the
children's included) and of its warm start's server and programs (tests/warm_start.py) over
each test's setup, call and teardown, and writes them beside
TFATTN_DURATIONS_OUT at its end; `python tests/file_durations.py --merge DIR` sums the
processes' files into tests/durations.json."""

import json
import os
import sys

import warm_start

HERE = os.path.dirname(os.path.abspath(__file__))
DURATIONS = os.path.join(HERE, "durations.json")
OUT_VARIABLE = "TFATTN_DURATIONS_OUT"
# A test that is not slow by nature (no program, training run, XLA compile or polling server)
# but took this many CPU seconds or more, its setup included, runs in `make test` only.
FAST_TEST_LIMIT = 0.5


def cpu_seconds() -> float:
  """This test process's CPU seconds, its waited children's and its warm-started programs'."""
  return warm_start.process_cpu_seconds() + warm_start.cpu_seconds()


def _record(path: str) -> dict:
  """The recording at `path` ({} without one)."""
  if not os.path.exists(path):
    return {}
  with open(path) as f:
    return json.load(f)


def load(path: str = DURATIONS) -> dict:
  """{test file relative to tests/: CPU seconds} of the last recording ({} without one)."""
  record = _record(path)
  return record["files"] if record else {}


def load_slow_unit_tests(path: str = DURATIONS) -> dict:
  """{test id: CPU seconds} of the tests not marked slow that took FAST_TEST_LIMIT or more in
  the last recording ({} without one)."""
  return _record(path).get("slow_unit_tests", {})


def write_part(
  out_dir: str, worker: str, seconds: dict, slow_unit_tests: dict | None = None
) -> None:
  """One test process's record: {test file: CPU s} and {slow unit test id: CPU s}."""
  os.makedirs(out_dir, exist_ok=True)
  with open(os.path.join(out_dir, f"part-{worker}.json"), "w") as f:
    json.dump({"files": seconds, "slow_unit_tests": slow_unit_tests or {}}, f)


def merge(out_dir: str, target: str = DURATIONS) -> dict:
  """Sums every part in `out_dir` into `target` (tests/durations.json); returns the files'
  seconds, longest first."""
  files, slow_unit_tests = {}, {}
  for name in sorted(os.listdir(out_dir)):
    if name.startswith("part-") and name.endswith(".json"):
      with open(os.path.join(out_dir, name)) as f:
        part = json.load(f)
      for path, seconds in part["files"].items():
        files[path] = files.get(path, 0.0) + seconds
      slow_unit_tests.update(part["slow_unit_tests"])
  ordered = dict(sorted(((p, round(s, 1)) for p, s in files.items()), key=lambda x: -x[1]))
  record = {
    "what": "CPU seconds of each test file in one `make test-durations` run (the test process's "
    "and the programs it waited for); tests/conftest.py hands the longest out first. "
    f"slow_unit_tests: the tests not marked slow that took {FAST_TEST_LIMIT} CPU s or more "
    "(setup included); tests/conftest.py marks them slow, so `make test-fast` leaves them out",
    "machine": os.uname().machine + ", " + str(os.cpu_count()) + " cores",
    "files": ordered,
    "slow_unit_tests": dict(sorted((t, round(s, 1)) for t, s in slow_unit_tests.items())),
  }
  temp = target + ".tmp"
  with open(temp, "w") as f:
    json.dump(record, f, indent=1)
    f.write("\n")
  os.replace(temp, target)
  return ordered


def product_of(test_file: str) -> str:
  """The part of tfattn a test file tests, from its folder: 'serving/server/test_x.py' ->
  'serving/server', 'tfattn/test_y.py' -> 'tfattn', 'test_cli.py' -> 'top level'."""
  folders = test_file.split("/")[:-1]
  if not folders:
    return "top level"
  return "/".join(folders[:2]) if folders[0] == "serving" else folders[0]


def by_product(files: dict) -> list:
  """[(product, CPU seconds, test files)], most CPU first."""
  seconds, counts = {}, {}
  for path, cpu in files.items():
    product = product_of(path)
    seconds[product] = seconds.get(product, 0.0) + cpu
    counts[product] = counts.get(product, 0) + 1
  return sorted(((p, s, counts[p]) for p, s in seconds.items()), key=lambda row: -row[1])


def product_table(files: dict) -> str:
  """A markdown table of `by_product`, with each product's share of the whole."""
  total = sum(files.values()) or 1.0
  lines = ["| tests of | files | CPU s | share |", "|---|---|---|---|"]
  for product, seconds, count in by_product(files):
    lines.append(f"| {product} | {count} | {seconds:.0f} | {100 * seconds / total:.1f}% |")
  lines.append(f"| all | {len(files)} | {total:.0f} | 100% |")
  return "\n".join(lines)


USAGE = "usage: python tests/file_durations.py --merge DIR | --by_product [FILE]"

if __name__ == "__main__":
  if len(sys.argv) == 3 and sys.argv[1] == "--merge":
    merged = merge(sys.argv[2])
    print(f"wrote {DURATIONS}: {len(merged)} files, {sum(merged.values()):.0f} CPU s in all")
  elif len(sys.argv) in (2, 3) and sys.argv[1] == "--by_product":
    path = sys.argv[2] if len(sys.argv) == 3 else DURATIONS
    if not os.path.exists(path):
      print(
        f"file_durations: error: no such file: {path} (make test-durations writes it)",
        file=sys.stderr,
      )
      sys.exit(2)
    print(product_table(load(path)))
  else:
    print(USAGE, file=sys.stderr)
    sys.exit(2)
