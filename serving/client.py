"""`python -m serving.client` moved to `python -m serving.tools.client`
(issue 40): a pointer, no alias."""

import sys

MOVED_TO = "serving.tools.client"
if __name__ != "__main__":
  raise ImportError(f"serving.client moved to {MOVED_TO}")
print(f"serving.client: error: moved; run python -m {MOVED_TO}", file=sys.stderr)
sys.exit(2)  # a usage mistake, as cli.fail exits
