"""Decoding speed: cached vs uncached greedy at 16, 64 and 128 output tokens, beam 4 vs greedy,
padded (XLA) decoding, and sampling (plain, top-k + top-p, top-p) against greedy in graph mode
and under XLA, all measured in one run; with --run_dir, also the graph and the XLA
export of a trained run side by side (serving_default at batch 1 and 32: p50/p99, rows/s).

  python benchmarks/decode_speed.py [--batch=8] [--source_length=32]
  python benchmarks/decode_speed.py --run_dir=runs/default [--texts_file=FILE] [--seconds=20]

The model of the first part is the "small" config with random weights and EOS disabled, so every
run decodes exactly the requested number of tokens. The export part decodes real inputs (one text
a line in --texts_file, else random vocabulary pieces) with the run's trained weights.
"""

# ruff: noqa: E402 (TensorFlow is imported below the flag check, so a mistake costs no start)

import cli
import common

import dataclasses
import json
import os
from typing import Optional

import numpy as np

from settings import setting


@dataclasses.dataclass(frozen=True)
class DecodeSpeedFlags:
  """The flags of `benchmarks/decode_speed.py`."""

  batch: int = setting(8, "Rows per decoded batch.", minimum=1)
  source_length: int = setting(32, "Source pieces per row.", minimum=1)
  rounds: int = setting(5, "Interleaved rounds (the median is reported).", minimum=1)
  run_dir: Optional[str] = setting(None, "Also compare the graph and XLA exports of this run.")
  texts_file: Optional[str] = setting(
    None, "Inputs for the export comparison, one a line (TSV: the first column)."
  )
  beam: int = setting(4, "Export beam size.", minimum=1)
  seconds: float = setting(20.0, "Export comparison: seconds per batch size.", minimum=0)
  skip_model: bool = setting(False, "Only the export comparison.")


def _define_flags():

  cli.define_flags(DecodeSpeedFlags)


if __name__ == "__main__":
  _define_flags()
  cli.check_flags_now()  # a mistake is one line before TensorFlow's start
  cli.start_tensorflow_quietly()  # before TensorFlow is imported below

import tensorflow as tf

import tfattn
from tfattn import decoding
from tfattn.decode_options import DecodeOptions
from tfattn.support.reference_decoding import reference_decode


def make_model(vocab=8000, preset="small"):
  config = tfattn.TransformerConfig.preset(
    preset,
    source_vocab_size=vocab,
    target_vocab_size=vocab,
    tie_output_embedding=False,
    max_length=256,
  )
  model = tfattn.Transformer(config)
  bias = np.zeros([vocab], np.float32)
  bias[config.eos_id] = bias[config.pad_id] = -1e4  # never stop early
  model.output_projection.bias.assign(bias)
  return model


def _random_texts(tokenizer, vocab_size, count, seed=0):
  """Texts of 4-30 random vocabulary pieces, for when no --texts_file is given."""
  rng = np.random.default_rng(seed)
  ids = [rng.integers(4, vocab_size, rng.integers(4, 31)).tolist() for _ in range(count)]
  return [t.decode() for t in tokenizer.detokenize(tf.ragged.constant(ids).to_tensor()).numpy()]


def compare_exports(args, batch_sizes=(1, 32)):
  """Exports the run twice (graph, xla), loads both as the server does (`Servable`: TF
  Serving's session loader), replays their warm-up records, and times serving_default on
  consecutive batches of the texts, interleaving the two exports. Returns {batch size: {mode:
  {"p50_ms", "p99_ms", "rows_per_second"}}}."""
  import tempfile

  with tempfile.TemporaryDirectory(prefix="decode-speed-") as base:  # the two exports
    return _time_exports(args, base, batch_sizes)


def _time_exports(args, base, batch_sizes):
  """compare_exports with its exports written under `base`."""
  import statistics
  import time

  from serving import export
  from serving.server.model_manager import Servable
  from tfattn import text
  from tfattn.support.run_dir import RunDir

  options = DecodeOptions(beam_size=args.beam)
  paths = {
    mode: export.export(
      args.run_dir,
      os.path.join(base, mode),
      options=options,
      decode=mode,
      warmup_batch_sizes=tuple(batch_sizes),
    )
    for mode in ("graph", "xla")
  }
  servables = {}
  for mode, path in paths.items():
    servables[mode] = Servable(mode, 1, path)
    servables[mode].warm_up()  # as the server does before a version is AVAILABLE
  if args.texts_file:
    texts = common.read_texts(args.texts_file)
  else:
    tokenizer = text.load_tokenizer(text.tokenizer_path(RunDir(args.run_dir).vocab, "source"))
    with open(os.path.join(paths["graph"], export.EXPORT_INFO_FILE)) as f:
      vocab_size = json.load(f)["model_config"]["source_vocab_size"]
    texts = _random_texts(tokenizer, vocab_size, 512)
  print(
    f"\nexports of {args.run_dir} (beam {args.beam}), serving_default in-process (TF "
    f"Serving's session loader), {len(texts)} texts in consecutive batches, "
    f"~{args.seconds:.0f} s per batch size"
  )
  print(f"{'batch':>5} {'decode':>6} {'p50 ms':>8} {'p99 ms':>8} {'rows/s':>8}")
  results = {}
  for batch in batch_sizes:
    batches = [
      np.array((texts * (batch // len(texts) + 2))[i : i + batch], dtype=object)
      for i in range(0, len(texts), batch)
    ]
    latencies = {mode: [] for mode in servables}
    deadline, i = time.time() + args.seconds, 0
    while time.time() < deadline or i < 2:
      for mode, servable in servables.items():  # the same batch for both, in turn
        start = time.perf_counter()
        servable.run(
          "serving_default", {"text": batches[i % len(batches)]}, output_names=["translation"]
        )
        latencies[mode].append(time.perf_counter() - start)
      i += 1
    summary = {}
    for mode, values in latencies.items():
      values.sort()
      summary[mode] = {
        "p50_ms": statistics.median(values) * 1000,
        "p99_ms": values[min(len(values) - 1, int(0.99 * len(values)))] * 1000,
        "rows_per_second": batch * len(values) / sum(values),
      }
      print(
        f"{batch:>5} {mode:>6} {summary[mode]['p50_ms']:8.1f} {summary[mode]['p99_ms']:8.1f} "
        f"{summary[mode]['rows_per_second']:8.1f}"
      )
    print(
      f"batch {batch}: XLA p50 {summary['graph']['p50_ms'] / summary['xla']['p50_ms']:.2f}x "
      f"lower, rows/s "
      f"{summary['xla']['rows_per_second'] / summary['graph']['rows_per_second']:.2f}x "
      f"({i} batches each)"
    )
    results[batch] = summary
  return results


def main(argv):
  del argv  # cli.run refuses positional arguments
  from absl import flags

  args = flags.FLAGS
  if args.run_dir and not os.path.isdir(args.run_dir):
    raise cli.UsageError(f"--run_dir={args.run_dir} is not a directory")
  print(f"device: {common.device_description()}")
  # Every variant measured here is its own tf.function over the same lambda, by design, so
  # TensorFlow's retracing advice is noise in this program.
  cli.drop_log_lines(["triggered tf.function retracing"])
  if not args.skip_model:
    compare_decoders(args)
  if args.run_dir:
    compare_exports(args)


def compare_decoders(args, preset="small", vocab=8000, lengths=(16, 64, 128), length=64):
  """Times greedy cached against uncached at each of `lengths` output tokens, then at `length`
  tokens beam 4 and padded (XLA) greedy against greedy, then sampling (`compare_sampling`), on
  a `preset` model with random weights. Returns {"cached_vs_uncached": {tokens: {"cached",
  "uncached"}}, "decoders": {"greedy", "beam", "xla"}, "sampling": {variant: seconds}}, in
  output tokens/s but for sampling."""
  model = make_model(vocab, preset)
  spec = tf.TensorSpec([None, None], tf.int32)
  source = tf.constant(
    np.random.default_rng(0).integers(3, vocab, [args.batch, args.source_length]), tf.int32
  )

  made = {}

  def greedy(length, padded_decode=False):
    # One function a (length, mode), made once: each new one traces (and under XLA compiles)
    # again, and the sections below time the same decoders.
    if (length, padded_decode) not in made:
      made[length, padded_decode] = tf.function(
        lambda s: (
          decoding.greedy_decode(
            model, s, max_decode_length=length, padded_decode=padded_decode
          ).ids
        ),
        input_signature=[spec],
        jit_compile=padded_decode,
        autograph=False,
      )
    return made[length, padded_decode]

  def uncached_greedy(length):  # the reference: the decoder re-run on the whole prefix a step
    options = DecodeOptions(strategy="greedy", max_decode_length=length)
    return tf.function(
      lambda s: reference_decode(model, s, options).ids, input_signature=[spec], autograph=False
    )

  def call(fn):
    return lambda: fn(source).numpy()

  c = model.config
  print(
    f"model: {preset} ({c.num_encoder_layers}+{c.num_decoder_layers} layers, d_model "
    f"{c.d_model}), batch {args.batch}, source length {args.source_length}; output tokens/s "
    f"(batch x length / seconds), median of {args.rounds} interleaved rounds\n"
  )
  print(f"{'tokens':>6} {'cached tok/s':>13} {'uncached tok/s':>15} {'speed-up':>9}")
  results = {"cached_vs_uncached": {}}
  for tokens in lengths:
    seconds = common.interleaved_medians(
      {"cached": call(greedy(tokens)), "uncached": call(uncached_greedy(tokens))},
      args.rounds,
      1,
    )
    rates = {k: args.batch * tokens / v for k, v in seconds.items()}
    results["cached_vs_uncached"][tokens] = rates
    print(
      f"{tokens:>6} {rates['cached']:13.0f} {rates['uncached']:15.0f} "
      f"{rates['cached'] / rates['uncached']:8.1f}x"
    )

  beam = tf.function(
    lambda s: decoding.beam_decode(model, s, beam_size=4, alpha=0.6, max_decode_length=length).ids,
    input_signature=[spec],
    autograph=False,
  )
  seconds = common.interleaved_medians(
    {
      "greedy": call(greedy(length)),
      "beam": call(beam),
      "xla": call(greedy(length, padded_decode=True)),
    },
    args.rounds,
    1,
  )
  rate = results["decoders"] = {k: args.batch * length / v for k, v in seconds.items()}
  print(
    f"\nat {length} tokens: greedy {rate['greedy']:.0f} tok/s, beam 4 {rate['beam']:.0f} "
    f"tok/s (beam costs {rate['greedy'] / rate['beam']:.1f}x greedy's time), padded greedy "
    f"under XLA {rate['xla']:.0f} tok/s ({rate['xla'] / rate['greedy']:.2f}x graph-mode "
    f"cached greedy)"
  )
  results["sampling"] = compare_sampling(
    args, model, source, greedy(length), greedy(length, padded_decode=True), length
  )
  return results


def compare_sampling(args, model, source, greedy, xla_greedy, length):
  """Sampling's cost against greedy's (the same loop, another token choice), graph and XLA.
  Returns {variant: median seconds a call}."""
  spec = [tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([None], tf.int64)]
  seeds = tf.range(args.batch, dtype=tf.int64)

  def sample(padded_decode=False, **cut):
    fn = tf.function(
      lambda s, seeds: (
        decoding.sample_decode(
          model, s, max_decode_length=length, seeds=seeds, padded_decode=padded_decode, **cut
        ).ids
      ),
      input_signature=spec,
      jit_compile=padded_decode,
      autograph=False,
    )
    return lambda: fn(source, seeds).numpy()

  variants = {
    "greedy": lambda: greedy(source).numpy(),
    "sample": sample(),
    "top-k 50, top-p 0.9": sample(top_k=50, top_p=0.9),
    "top-p 0.9": sample(top_p=0.9),
    "XLA greedy": lambda: xla_greedy(source).numpy(),
    "XLA sample": sample(padded_decode=True),
    "XLA top-p 0.9": sample(padded_decode=True, top_p=0.9),
  }
  seconds = common.interleaved_medians(variants, args.rounds, 1)
  print(
    f"\nsampling at {length} tokens, time relative to greedy in the same mode (median of "
    f"{args.rounds} interleaved rounds):"
  )
  for name, value in seconds.items():
    base = seconds["XLA greedy" if name.startswith("XLA") else "greedy"]
    print(f"  {name:22s} {value * 1000:8.1f} ms  {value / base:5.2f}x")
  return seconds


if __name__ == "__main__":
  cli.run(main)  # its flags defined above
