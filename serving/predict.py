"""`python -m serving.predict` moved to `python -m serving.tools.predict`
(issue 40): a pointer, no alias."""

import sys

MOVED_TO = "serving.tools.predict"
if __name__ != "__main__":
  raise ImportError(f"serving.predict moved to {MOVED_TO}")
print(f"serving.predict: error: moved; run python -m {MOVED_TO}", file=sys.stderr)
sys.exit(2)  # a usage mistake, as cli.fail exits
