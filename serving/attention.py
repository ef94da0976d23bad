"""`python -m serving.attention` moved to `python -m serving.tools.attention_maps`
(issue 40): a pointer, no alias."""

import sys

MOVED_TO = "serving.tools.attention_maps"
if __name__ != "__main__":
  raise ImportError(f"serving.attention moved to {MOVED_TO}")
print(f"serving.attention: error: moved; run python -m {MOVED_TO}", file=sys.stderr)
sys.exit(2)  # a usage mistake, as cli.fail exits
