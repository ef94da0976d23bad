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
  parser.add_argument("--rounds", type=int, default=5)
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

  def call(fn):
    return lambda: fn(source).numpy()

  print(f"device: {common.device_description()}")
  print(f"model: small (4+4 layers, d_model 256), batch {args.batch}, source length "
        f"{args.source_length}; output tokens/s (batch x length / seconds), median of "
        f"{args.rounds} interleaved rounds\n")
  print(f"{'tokens':>6} {'cached tok/s':>13} {'uncached tok/s':>15} {'speed-up':>9}")
  for length in (16, 64, 128):
    seconds = common.interleaved_medians(
        {"cached": call(greedy(length)), "uncached": call(greedy(length, use_cache=False))},
        args.rounds, 1)
    cached, uncached = (args.batch * length / seconds[k] for k in ("cached", "uncached"))
    print(f"{length:>6} {cached:13.0f} {uncached:15.0f} {cached / uncached:8.1f}x")

  length = 64
  beam = tf.function(lambda s: decoding.beam_search(model, s, beam_size=4, alpha=0.6,
                                                    max_decode_length=length)[0],
                     input_signature=[spec])
  seconds = common.interleaved_medians(
      {"greedy": call(greedy(length)), "beam": call(beam),
       "xla": call(greedy(length, padded_decode=True))}, args.rounds, 1)
  rate = {k: args.batch * length / v for k, v in seconds.items()}
  print(f"\nat {length} tokens: greedy {rate['greedy']:.0f} tok/s, beam 4 {rate['beam']:.0f} "
        f"tok/s (beam costs {rate['greedy'] / rate['beam']:.1f}x greedy's time), padded greedy "
        f"under XLA {rate['xla']:.0f} tok/s ({rate['xla'] / rate['greedy']:.2f}x graph-mode "
        f"cached greedy)")

if __name__ == "__main__":
  main()
