"""The slow reference decoding: each step re-runs a model's teacher-forced forward pass on the
whole prefix, with no cache. Tests compare the cached searches (graph mode, XLA, windowed) with
it, and `benchmarks/decode_speed.py` times it against the cache.

  found = reference_decode(model, inputs, options, seeds=seeds)  # what decoding.decode finds

Each model supplies its own uncached step (`uncached_start(inputs, options, beams=)`: its
`start_decoding` with the step and the cache replaced), so the length rules, limits and first
tokens are the cached search's.
"""

from typing import Optional

import tensorflow as tf

from tfattn import decoding
from tfattn.decode_options import BEAM, SAMPLE, DecodeOptions


def reference_start(model, inputs: tf.Tensor, options: DecodeOptions, beams: int = 1):
  """The model's `DecodingStart` with its uncached step (`model.uncached_start`): `inputs`
  int32 `[batch, length]` (a source, a prompt), `beams` rows per example."""
  return model.uncached_start(inputs, options, beams=beams)


def reference_decode(
  model, inputs: tf.Tensor, options: DecodeOptions, *, seeds: Optional[tf.Tensor] = None
) -> decoding.Hypotheses:
  """`decoding.decode` through the uncached step, every example kept in the batch to the end
  (the simplest search: the cached one drops finished examples): ids int32 `[batch, length]`,
  scores and log_probs float32 `[batch]` (graph mode; its shapes grow each step, so not under
  XLA)."""
  if options.strategy == BEAM and options.beam_size > 1:
    start = reference_start(model, inputs, options, options.beam_size)
    return decoding.first_beam(decoding.beam_search(start, options, compact_at=None))
  start = reference_start(model, inputs, options)
  if options.strategy == SAMPLE:
    return decoding.sample_loop(start, options, seeds, compact_at=None)
  return decoding.token_loop(start, options, compact_at=None)
