"""`python -m serving.beam_predict` moved to `python -m serving.tools.beam_predict`
(issue 40): a pointer, no alias."""

import sys

MOVED_TO = "serving.tools.beam_predict"
if __name__ != "__main__":
  raise ImportError(f"serving.beam_predict moved to {MOVED_TO}")
print(f"serving.beam_predict: error: moved; run python -m {MOVED_TO}", file=sys.stderr)
sys.exit(2)  # a usage mistake, as cli.fail exits
