"""`python -m serving.check` moved to `python -m serving.export.check`
(issue 40): a pointer, no alias."""

import sys

MOVED_TO = "serving.export.check"
if __name__ != "__main__":
  raise ImportError(f"serving.check moved to {MOVED_TO}")
print(f"serving.check: error: moved; run python -m {MOVED_TO}", file=sys.stderr)
sys.exit(2)  # a usage mistake, as cli.fail exits
