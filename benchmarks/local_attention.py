"""Restricted self-attention (`attention_window`) against full attention, side by side: full, r=64
and r=128 for
  * layer: one causal `SelfAttention` (d_model 256, 4 heads, batch 1), forward + backward, at
    n = 512 .. 16,384 (full up to --max_full_length, where it still fits);
  * train: one training step (forward, backward, Adam) of a small language model at --train_length;
  * generate: a small language model generating --generate_tokens tokens greedily (graph mode;
    the window decodes through its ring cache, full attention through its growing cache), and
    half as many, to see whether memory grows with the output.

  python benchmarks/local_attention.py [--lengths=512,1024,...] [--windows=64,128]

Each measurement runs in a process of its own (`--worker`), so that its memory is its own: peak
memory is the process's peak resident set (VmHWM) above its resident set just before the
measured call, after a warm-up call at a short length (TensorFlow, the model and the kernels
already loaded). Time is the median of --repeats calls after the warm-up. It prints each
quantity's ratio full / window and the growth exponent: the slope of log(quantity) against
log(n) fitted over the lengths measured.

Targets (issue 39): at n = 8192, r = 128 at least 5x faster and 10x less memory than full; the
window's time exponent <= 1.15 (full ~2); generation memory flat in the output length.
"""

import cli
import common

import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time
from typing import List, Optional

import numpy as np

from settings import setting

FULL = "full"
PROMPT_IDS = [[5, 6, 7, 8]]  # the generation's prompt


def _rss_kb(field):
  with open("/proc/self/status") as f:
    for line in f:
      if line.startswith(field + ":"):
        return int(line.split()[1])
  raise RuntimeError(f"no {field} in /proc/self/status")


def _peak_above_now(fn):
  """(result of fn(), MB the process's peak RSS rose above its RSS just before fn)."""
  before = _rss_kb("VmRSS")
  with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # resets VmHWM to the current RSS (Linux >= 4.0)
  result = fn()
  return result, max(_rss_kb("VmHWM") - before, 0) / 1024


def _window(mode):
  return None if mode == FULL else int(mode)


def _layer_fn(mode, d_model=256, heads=4):
  import tensorflow as tf

  from tfattn.attention import SelfAttention

  layer = SelfAttention(d_model, heads, causal=True, window=_window(mode))

  @tf.function(input_signature=[tf.TensorSpec([1, None, d_model])], autograph=False)
  def forward_backward(x):
    with tf.GradientTape() as tape:
      tape.watch(x)
      loss = tf.reduce_sum(layer(x))
    return tape.gradient(loss, [x, *layer.trainable_variables])

  def run(length):
    x = tf.random.stateless_normal([1, length, d_model], [0, length])
    return [g.numpy() for g in forward_backward(x)]

  return run


def _language_model(mode, max_length, d_model=128, layers=2, vocab=1000):
  import tfattn
  from tfattn.language_model import LanguageModel

  config = tfattn.TransformerConfig.preset(
    "small",
    source_vocab_size=vocab,
    target_vocab_size=vocab,
    d_model=d_model,
    num_heads=4,
    dff=4 * d_model,
    num_decoder_layers=layers,
    dropout_rate=0.0,
    max_length=max_length,
    attention_window=_window(mode),
  )
  return LanguageModel(config)


def _train_fn(mode, max_length):
  import keras
  import tensorflow as tf

  model = _language_model(mode, max_length)
  optimizer = keras.optimizers.Adam(1e-4)

  @tf.function(input_signature=[tf.TensorSpec([1, None], tf.int32)], autograph=False)
  def train_step(ids):
    with tf.GradientTape() as tape:
      logits = model(ids[:, :-1], training=True)
      loss = tf.reduce_mean(
        tf.nn.sparse_softmax_cross_entropy_with_logits(labels=ids[:, 1:], logits=logits)
      )
    variables = model.trainable_variables
    optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
    return loss

  def run(length):
    ids = tf.random.stateless_uniform([1, length + 1], [1, length], 3, 1000, tf.int32)
    return float(train_step(ids))

  return run


def _generate_fn(mode, max_length):
  import tensorflow as tf

  from tfattn import decoding
  from tfattn.decode_options import DecodeOptions

  prompt = tf.constant(PROMPT_IDS)
  model = _language_model(mode, max_length)
  eos = model.config.eos_id

  def never_eos(logits, state):
    """Greedy without EOS: every run generates exactly the asked number of tokens."""
    del state
    return tf.argmax(logits - 1e9 * tf.one_hot(eos, tf.shape(logits)[-1]), -1, tf.int32)

  traced = {}  # one graph a length (the loop's length is static)

  def run(length):
    if length not in traced:
      options = DecodeOptions(strategy="greedy", max_decode_length=length)
      traced[length] = tf.function(
        lambda p: decoding.token_loop(model.start_decoding(p, options), options, never_eos).ids,
        autograph=False,
      )
    ids = traced[length](prompt)
    return int(np.sum(ids.numpy() > 0))

  def cache_mb(length):
    """MB of the decoding cache after `length` tokens, from its tensors' shapes: a ring keeps
    its slots; a growing cache holds every position (the prompt's and the generated)."""
    options = DecodeOptions(strategy="greedy", max_decode_length=length)
    cache = tf.nest.flatten(model.start_decoding(prompt, options).cache)
    per_position = sum(t.shape[0] * t.shape[1] * t.shape[3] * t.dtype.size for t in cache)
    ring = model.config.attention_window is not None
    positions = cache[0].shape[2] if ring else prompt.shape[1] + length
    return per_position * positions / 2**20

  run.cache_mb = cache_mb
  return run


def measure(what, mode, length, repeats, max_length):
  """Runs one measurement in this process: {"seconds", "peak_mb"}."""
  warm_up_length = 64
  if what == "layer":
    run = _layer_fn(mode)
  elif what == "train":
    run = _train_fn(mode, max_length)
  else:
    run = _generate_fn(mode, max_length)
    warm_up_length = 16
  run(warm_up_length)
  # Generation: the first call at `length` traces its loop (the same graph whatever the length)
  # and is the one whose memory counts; a repeated call would find the memory freed by the
  # first still held by the allocator.
  _, peak = _peak_above_now(lambda: run(length))
  seconds = []
  for _ in range(repeats):
    started = time.perf_counter()
    run(length)
    seconds.append(time.perf_counter() - started)
  found = {"seconds": statistics.median(seconds), "peak_mb": peak}
  if what == "generate":
    found["cache_mb"] = run.cache_mb(length)
  return found


def _in_worker(args, what, mode, length):
  """measure() in a fresh process: {"seconds", "peak_mb"}, or None when it failed (e.g. did not
  fit in memory)."""
  command = [
    sys.executable,
    os.path.abspath(__file__),
    f"--worker={what}:{mode}:{length}",
    f"--repeats={args.repeats}",
    f"--generate_tokens={args.generate_tokens}",
  ]
  result = subprocess.run(
    command, capture_output=True, text=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  )
  for line in result.stdout.splitlines():
    if line.startswith("RESULT "):
      return json.loads(line[len("RESULT ") :])
  print(f"  {what} {mode} n={length} failed: {result.stderr.strip()[-300:]}", flush=True)
  return None


def _measured(args, what, mode, length):
  print(f"  measuring {what} {mode} n={length}", flush=True)
  max_length = max(args.generate_tokens + 8, args.train_length + 1)
  if args.in_process:
    return measure(what, mode, length, args.repeats, max_length)
  return _in_worker(args, what, mode, length)


def exponent(lengths, values):
  """The slope of log(values) against log(lengths): 1 linear, 2 quadratic."""
  return float(np.polyfit(np.log(lengths), np.log(values), 1)[0])


def _table(title, lengths, modes, results, key, unit):
  print(f"\n{title} ({unit})")
  print(
    f"{'n':>8}"
    + "".join(f"{m:>12}" for m in modes)
    + "".join(f"{'full/' + m:>12}" for m in modes if m != FULL)
  )
  for n in lengths:
    row = [results[m].get(n) for m in modes]
    cells = "".join(f"{r[key]:12.3f}" if r else f"{'-':>12}" for r in row)
    full = results[FULL].get(n)
    ratios = "".join(
      f"{full[key] / max(results[m][n][key], 1e-9):11.1f}x"
      if full and results[m].get(n)
      else f"{'-':>12}"
      for m in modes
      if m != FULL
    )
    print(f"{n:>8}" + cells + ratios)
  slopes = []
  for m in modes:
    points = [(n, results[m][n][key]) for n in lengths if results[m].get(n)]
    points = [(n, v) for n, v in points if v > 0]
    slopes.append(exponent(*zip(*points)) if len(points) >= 2 else float("nan"))
  if len(lengths) >= 2:
    print(f"{'exponent':>8}" + "".join(f"{s:12.2f}" for s in slopes))
  return dict(zip(modes, slopes))


def run_all(args):
  """Every measurement; returns {section: {mode: {n: result}}} and prints the tables."""
  modes = [FULL] + [str(r) for r in args.windows]
  results = {"layer": {}, "train": {}, "generate": {}}
  for mode in modes:
    results["layer"][mode] = {}
    for n in args.lengths if "layer" in args.sections else ():
      if mode == FULL and n > args.max_full_length:
        continue
      found = _measured(args, "layer", mode, n)
      if found is None:
        break
      results["layer"][mode][n] = found
    results["train"][mode] = {}
    if "train" in args.sections:
      found = _measured(args, "train", mode, args.train_length)
      results["train"][mode] = {args.train_length: found} if found else {}
    results["generate"][mode] = {}
    for tokens in (args.generate_tokens // 2, args.generate_tokens):
      if "generate" in args.sections:
        results["generate"][mode][tokens] = _measured(args, "generate", mode, tokens)
  print(
    f"\ndevice: {common.device_description()}; peak memory: the process's peak RSS above its "
    "RSS before the measured call (one process a measurement)"
  )
  slopes = {}
  tables = (
    (
      "layer",
      "one causal SelfAttention, d_model 256, 4 heads, batch 1: forward + backward",
      args.lengths,
      (("seconds", "s"), ("peak_mb", "MB")),
    ),
    (
      "train",
      "small language model (d_model 128, 2 layers): one training step",
      [args.train_length],
      (("seconds", "s"), ("peak_mb", "MB")),
    ),
    (
      "generate",
      "small language model: greedy generation, n = tokens generated",
      [args.generate_tokens // 2, args.generate_tokens],
      (("seconds", "s"), ("peak_mb", "MB"), ("cache_mb", "MB of cache, from its shapes")),
    ),
  )
  for section, title, lengths, quantities in tables:
    if section not in args.sections:
      continue
    for key, unit in quantities:
      slopes[section, key] = _table(title, lengths, modes, results[section], key, unit)
  return results, slopes


@dataclasses.dataclass(frozen=True)
class LocalAttentionFlags:
  """The flags of `benchmarks/local_attention.py`."""

  lengths: List[str] = setting(
    ("512", "1024", "2048", "4096", "8192", "16384"), "Layer: sequence lengths."
  )
  windows: List[str] = setting(("64", "128"), "Windows r compared with full attention.")
  max_full_length: int = setting(8192, "Layer: the longest n full attention runs at.", minimum=1)
  train_length: int = setting(4096, "Training step: tokens a row.", minimum=2)
  generate_tokens: int = setting(
    2000, "Generation: tokens generated (and half as many).", minimum=2
  )
  repeats: int = setting(3, "Timed calls a measurement (the median).", minimum=1)
  sections: List[str] = setting(("layer", "train", "generate"), "What to measure.")
  in_process: bool = setting(False, "Measure in this process (tests; memory then shared).")
  worker: Optional[str] = setting(None, "Internal: what:mode:n, one measurement, printed as JSON.")


def _define_flags():

  cli.define_flags(LocalAttentionFlags)


def main(argv):
  del argv
  from absl import flags

  args = flags.FLAGS
  try:
    args.lengths = sorted(int(n) for n in args.lengths)
    args.windows = [int(r) for r in args.windows]
  except ValueError:
    raise cli.UsageError("--lengths and --windows must be integers") from None
  if any(n < 1 for n in args.lengths) or any(r < 1 for r in args.windows):
    raise cli.UsageError("--lengths and --windows must be positive")
  unknown = set(args.sections) - {"layer", "train", "generate"}
  if unknown:
    raise cli.UsageError(f"--sections: unknown {sorted(unknown)}; choose layer, train, generate")
  cli.start_tensorflow_quietly()
  if args.worker:
    what, mode, length = args.worker.split(":")
    max_length = max(args.generate_tokens + 8, args.train_length + 1)
    print("RESULT " + json.dumps(measure(what, mode, int(length), args.repeats, max_length)))
    return
  run_all(args)


if __name__ == "__main__":
  _define_flags()
  cli.run(main)
