"""Decoding speed: cached vs uncached greedy at 16, 64 and 128 output tokens, beam 4 vs greedy,
and padded (XLA) decoding, all measured in one run.

  python benchmarks/decode_speed.py [--batch 8] [--source_length 32]

The model is the "small" config with random weights and EOS disabled, so every run decodes
exactly the requested number of tokens.
"""

import argparse

import common
import numpy as np
import tensorflow as tf

import tfattn
from tfattn import decoding


def make_model(vocab=8000):
  config = tfattn.TransformerConfig.preset("small", source_vocab_size=vocab,
                                           target_vocab_size=vocab, tie_output_embedding=False,
                                           max_length=256)
  model = tfattn.Transformer(config)
  bias = np.zeros([vocab], np.float32)
  bias[config.eos_id] = bias[config.pad_id] = -1e4  # never stop early
  model.output_projection.bias.assign(bias)
  return model


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--batch", type=int, default=8)
  parser.add_argument("--source_length", type=int, default=32)
  parser.add_argument("--repeats", type=int, default=3)
  args = parser.parse_args()
  model = make_model()
  spec = tf.TensorSpec([None, None], tf.int32)
  source = tf.constant(np.random.default_rng(0).integers(3, 8000, [args.batch,
                                                                   args.source_length]),
                       tf.int32)

  def greedy(length, **kwargs):
    return tf.function(lambda s: decoding.greedy_decode(model, s, max_decode_length=length,
                                                        **kwargs)[0],
                       input_signature=[spec], jit_compile=kwargs.get("padded_decode", False))

  def rate(fn, length):
    return args.batch * length / common.timed(lambda: fn(source).numpy(), args.repeats)

  print(f"device: {common.device_description()}")
  print(f"model: small (4+4 layers, d_model 256), batch {args.batch}, source length "
        f"{args.source_length}; output tokens/s (batch x length / seconds)\n")
  print(f"{'tokens':>6} {'cached tok/s':>13} {'uncached tok/s':>15} {'speed-up':>9}")
  for length in (16, 64, 128):
    cached = rate(greedy(length), length)
    uncached = rate(greedy(length, use_cache=False), length)
    print(f"{length:>6} {cached:13.0f} {uncached:15.0f} {cached / uncached:8.1f}x")

  length = 64
  greedy_rate = rate(greedy(length), length)
  beam = tf.function(lambda s: decoding.beam_search(model, s, beam_size=4, alpha=0.6,
                                                    max_decode_length=length)[0],
                     input_signature=[spec])
  beam_rate = rate(beam, length)
  xla_rate = rate(greedy(length, padded_decode=True), length)
  print(f"\nat {length} tokens: greedy {greedy_rate:.0f} tok/s, beam 4 {beam_rate:.0f} tok/s "
        f"(beam costs {greedy_rate / beam_rate:.1f}x greedy's time), padded greedy under XLA "
        f"{xla_rate:.0f} tok/s ({xla_rate / greedy_rate:.2f}x graph-mode cached greedy)")


if __name__ == "__main__":
  main()
