"""`python -m serving.demo` moved to `python -m serving.tools.demo`
(issue 40): a pointer, no alias."""

import sys

MOVED_TO = "serving.tools.demo"
if __name__ != "__main__":
  raise ImportError(f"serving.demo moved to {MOVED_TO}")
print(f"serving.demo: error: moved; run python -m {MOVED_TO}", file=sys.stderr)
sys.exit(2)  # a usage mistake, as cli.fail exits
