"""Length buckets: the few padded lengths that bound the shapes an XLA program is compiled for
(training batches and the export's decoder pad their inputs up to one of them)."""

from typing import List


def length_buckets(max_length: int, smallest: int) -> List[int]:
  """`smallest`, doubling while below `max_length`, then `max_length`: [8, 16, 32, 64] for
  (64, 8); [max_length] when `max_length <= smallest`."""
  buckets, length = [], smallest
  while length < max_length:
    buckets.append(length)
    length *= 2
  return [*buckets, max_length]
