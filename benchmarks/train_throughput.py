"""Train throughput: tfattn vs a Keras-MultiHeadAttention Transformer written the way the
TensorFlow tutorial writes it, same config, same training step, measured side by side.

  python benchmarks/train_throughput.py [--config small|base] [--dtype float32|bfloat16]
      [--steps 5] [--batch 64] [--length 64] [--models tfattn,keras_mha] [--xla on]
  python benchmarks/train_throughput.py --pairs_file=multi30k_train.tsv [--xla off,on]

Prints target tokens/s of both, the ratio, with and without XLA, and model FLOP utilisation:
analytic training FLOPs (`tfattn.flops`, tested against the graph's matmuls) over a matmul
peak measured on the same device in the same dtype. With bfloat16, tfattn computes in
bfloat16 (`compute_dtype`) and the peer runs under Keras' `mixed_bfloat16` policy; variables
stay float32 in both.

With `--pairs_file` (source<TAB>target lines, e.g. Multi30k's), it measures packing instead:
tfattn's training step (the trainer's loss, `train.kinds.Seq2Seq`) on the batches the training
pipeline cuts from those pairs (SentencePiece vocabularies of the config's size learned from
them), unpacked (token batching: up to `--batch` x `--length` padded tokens a side, by length
bucket), packed (`--pack_examples`: the same tokens a batch, in rows of the length the trainer
chooses from the data) and packed_full (rows of `--length`), side by side. It prints real
(non-padding) target tokens per second and per CPU second, the share of real tokens (both
sides), pairs a row, the row length and the ratios.
"""

# ruff: noqa: E402 (TensorFlow is imported below the flag check, so a mistake costs no start)

import cli
import common

import dataclasses
import os
import statistics
import tempfile
import time
from typing import List, Optional

from settings import setting

CONFIGS = {
  "tiny": dict(d_model=32, num_heads=4, dff=64, num_layers=1, vocab=200),  # checks, not figures
  "small": dict(d_model=256, num_heads=8, dff=1024, num_layers=4, vocab=8000),
  "base": dict(d_model=512, num_heads=8, dff=2048, num_layers=6, vocab=32000),
}

MODELS = ("tfattn", "tfattn_ffd", "keras_mha")
XLA_MODES = ("off", "on")


@dataclasses.dataclass(frozen=True)
class TrainThroughputFlags:
  """The flags of `benchmarks/train_throughput.py`."""

  config: str = setting("small", "Model size.", choices=tuple(sorted(CONFIGS)))
  dtype: str = setting("float32", "Compute dtype.", choices=("float32", "bfloat16"))
  steps: int = setting(3, "Timed steps per round.", minimum=1)
  rounds: int = setting(3, "Interleaved rounds (the median is reported).", minimum=1)
  batch: int = setting(64, "Batch size.", minimum=1)
  length: int = setting(64, "Source and target length.", minimum=1)
  models: List[str] = setting(
    tuple(MODELS),
    "Models to measure, a comma list: tfattn, tfattn_ffd (+ dropout on the feed-forward hidden "
    "layer), keras_mha (the peer). Each model and XLA mode is one compile: ask only for what "
    "you need.",
  )
  xla: List[str] = setting(tuple(XLA_MODES), "XLA modes, a comma list: off, on.")
  pairs_file: Optional[str] = setting(
    None,
    "A source<TAB>target file: measure packed against unpacked training batches of its pairs "
    "(real target tokens/s) instead of the models on full random rows.",
  )


def _define_flags():

  cli.define_flags(TrainThroughputFlags)


if __name__ == "__main__":
  _define_flags()
  cli.check_flags_now()  # a mistake is one line before TensorFlow's start
  cli.start_tensorflow_quietly()  # before TensorFlow (and Keras, which imports it) below

import keras
import numpy as np
import tensorflow as tf

import tfattn
from tfattn import flops, losses, text
from train import data, kinds, packing, performance, tokenizer


# --- The peer: the TF tutorial's Transformer, with keras.layers.MultiHeadAttention ----------
def positional_encoding(length, depth):
  depth = depth / 2
  positions = np.arange(length)[:, np.newaxis]
  depths = np.arange(depth)[np.newaxis, :] / depth
  angle_rads = positions / (10000**depths)
  return tf.cast(np.concatenate([np.sin(angle_rads), np.cos(angle_rads)], axis=-1), tf.float32)


class PositionalEmbedding(keras.layers.Layer):
  def __init__(self, vocab_size, d_model):
    super().__init__()
    self.d_model = d_model
    self.embedding = keras.layers.Embedding(vocab_size, d_model)
    self.pos_encoding = positional_encoding(length=2048, depth=d_model)

  def call(self, x):
    length = tf.shape(x)[1]
    x = self.embedding(x)  # the policy's compute dtype: float32 or bfloat16
    x = x * tf.math.sqrt(tf.cast(self.d_model, x.dtype))
    return x + tf.cast(self.pos_encoding[tf.newaxis, :length, :], x.dtype)


class BaseAttention(keras.layers.Layer):
  def __init__(self, **kwargs):
    super().__init__()
    self.mha = keras.layers.MultiHeadAttention(**kwargs)
    self.layernorm = keras.layers.LayerNormalization()
    self.add = keras.layers.Add()


class CrossAttention(BaseAttention):
  def call(self, x, context, mask):
    attn_output = self.mha(query=x, key=context, value=context, attention_mask=mask)
    return self.layernorm(self.add([x, attn_output]))


class GlobalSelfAttention(BaseAttention):
  def call(self, x, mask):
    return self.layernorm(self.add([x, self.mha(query=x, value=x, key=x, attention_mask=mask)]))


class CausalSelfAttention(BaseAttention):
  def call(self, x):
    return self.layernorm(self.add([x, self.mha(query=x, value=x, key=x, use_causal_mask=True)]))


class FeedForward(keras.layers.Layer):
  def __init__(self, d_model, dff, dropout_rate=0.1):
    super().__init__()
    self.seq = keras.Sequential(
      [
        keras.layers.Dense(dff, activation="relu"),
        keras.layers.Dense(d_model),
        keras.layers.Dropout(dropout_rate),
      ]
    )
    self.add = keras.layers.Add()
    self.layer_norm = keras.layers.LayerNormalization()

  def call(self, x):
    return self.layer_norm(self.add([x, self.seq(x)]))


class KerasEncoderLayer(keras.layers.Layer):
  def __init__(self, d_model, num_heads, dff, dropout_rate=0.1):
    super().__init__()
    self.self_attention = GlobalSelfAttention(
      num_heads=num_heads, key_dim=d_model // num_heads, dropout=dropout_rate
    )
    self.ffn = FeedForward(d_model, dff)

  def call(self, x, mask):
    return self.ffn(self.self_attention(x, mask))


class KerasDecoderLayer(keras.layers.Layer):
  def __init__(self, d_model, num_heads, dff, dropout_rate=0.1):
    super().__init__()
    self.causal_self_attention = CausalSelfAttention(
      num_heads=num_heads, key_dim=d_model // num_heads, dropout=dropout_rate
    )
    self.cross_attention = CrossAttention(
      num_heads=num_heads, key_dim=d_model // num_heads, dropout=dropout_rate
    )
    self.ffn = FeedForward(d_model, dff)

  def call(self, x, context, cross_mask):
    return self.ffn(self.cross_attention(self.causal_self_attention(x), context, cross_mask))


class KerasTransformer(keras.Model):
  def __init__(self, num_layers, d_model, num_heads, dff, vocab, dropout_rate=0.1):
    super().__init__()
    self.source_embedding = PositionalEmbedding(vocab, d_model)
    self.target_embedding = PositionalEmbedding(vocab, d_model)
    self.encoder_layers = [
      KerasEncoderLayer(d_model, num_heads, dff, dropout_rate) for _ in range(num_layers)
    ]
    self.decoder_layers = [
      KerasDecoderLayer(d_model, num_heads, dff, dropout_rate) for _ in range(num_layers)
    ]
    self.dropout = keras.layers.Dropout(dropout_rate)
    self.final_layer = keras.layers.Dense(vocab)

  def call(self, inputs, training=False):
    source, target = inputs
    source_valid = tf.not_equal(source, 0)
    encoder_mask = source_valid[:, tf.newaxis, :] & source_valid[:, :, tf.newaxis]
    cross_mask = tf.broadcast_to(
      source_valid[:, tf.newaxis, :],
      [tf.shape(target)[0], tf.shape(target)[1], tf.shape(source)[1]],
    )
    x = self.dropout(self.source_embedding(source), training=training)
    for layer in self.encoder_layers:
      x = layer(x, encoder_mask, training=training)
    y = self.dropout(self.target_embedding(target), training=training)
    for layer in self.decoder_layers:
      y = layer(y, x, cross_mask, training=training)
    return self.final_layer(y)


# --- Measurement --------------------------------------------------------------------------
def _transformer_config(c, source_vocab_size, target_vocab_size, length, dtype):
  """The benchmarked Transformer: config `c`'s sizes (one of CONFIGS), dropout 0.1."""
  return tfattn.TransformerConfig.preset(
    "small",
    source_vocab_size=source_vocab_size,
    target_vocab_size=target_vocab_size,
    d_model=c["d_model"],
    num_heads=c["num_heads"],
    dff=c["dff"],
    num_encoder_layers=c["num_layers"],
    num_decoder_layers=c["num_layers"],
    dropout_rate=0.1,
    max_length=length,
    compute_dtype=dtype,
  )


def make_step(model_fn, variables, optimizer, jit):
  spec = tf.TensorSpec([None, None], tf.int32)

  @tf.function(input_signature=[spec, spec, spec], jit_compile=jit, autograph=False)
  def step(source, target_in, target_out):
    with tf.GradientTape() as tape:
      token_losses, weights = losses.label_smoothed_cross_entropy(  # sparse, float32
        model_fn(source, target_in), target_out, 0.1
      )
      loss = tf.reduce_sum(token_losses) / tf.reduce_sum(weights)
    grads = tape.gradient(loss, variables)
    optimizer.apply_gradients(zip(grads, variables))
    return loss

  return step


def measure(
  config_name="small",
  dtype="float32",
  steps=3,
  rounds=3,
  batch_size=64,
  length=64,
  models=MODELS,
  xla_modes=XLA_MODES,
  peak_seconds=2.0,
):
  """Times the training step of each (model, XLA mode) asked for, interleaved. Returns a dict:
  "device", "config", "peak_flops" (the measured matmul peak in `dtype`), "step_flops", and
  "variants": [{"model", "xla", "seconds_per_step", "target_tokens_per_second", "mfu"}]."""
  c = CONFIGS[config_name]
  rng = np.random.default_rng(0)
  batch = [
    tf.constant(rng.integers(3, c["vocab"], [batch_size, length]), tf.int32) for _ in range(3)
  ]
  config = _transformer_config(c, c["vocab"], c["vocab"], length, dtype)
  builders = {
    "tfattn": lambda: tfattn.Transformer(config),
    # The same model with tensor2tensor's extra dropout on the feed-forward hidden layer (our
    # placement before the paper's became the default): what that dropout costs.
    "tfattn_ffd": lambda: tfattn.Transformer(
      dataclasses.replace(config, feed_forward_dropout_rate=0.1)
    ),
    "keras_mha": lambda: _keras_peer(c, dtype, batch),
  }
  model_fns = {}
  for name in models:  # only the models asked for are built
    model = builders[name]()
    if name == "keras_mha":
      model_fns[name] = (lambda s, t, m=model: m((s, t), training=True), model.trainable_variables)
    else:
      model_fns[name] = (lambda s, t, m=model: m(s, t, training=True), model.trainable_variables)
  step_flops = flops.training_flops(flops.seq2seq_forward_flops(config, batch_size, length, length))
  device = "/GPU:0" if tf.config.list_logical_devices("GPU") else "/CPU:0"
  peak = performance.measure_matmul_peak(device, dtype, seconds=peak_seconds)
  timed = {}
  for xla in xla_modes:
    for name, (model_fn, variables) in model_fns.items():
      optimizer = keras.optimizers.Adam(1e-4, beta_1=0.9, beta_2=0.98, epsilon=1e-9)
      optimizer.build(variables)
      step = make_step(model_fn, variables, optimizer, xla == "on")
      timed[name, xla] = lambda step=step: step(*batch).numpy()
  seconds = common.interleaved_medians(timed, rounds, steps)
  return {
    "device": common.device_description(),
    "config": dict(name=config_name, dtype=dtype, batch=batch_size, length=length, **c),
    "peak_flops": peak,
    "step_flops": step_flops,
    "rounds": rounds,
    "steps": steps,
    "variants": [
      {
        "model": name,
        "xla": xla,
        "seconds_per_step": value,
        "target_tokens_per_second": batch_size * length / value,
        "mfu": step_flops / value / peak,
      }
      for (name, xla), value in seconds.items()
    ],
  }


# packed: rows of the length the trainer chooses from the data (`data.packed_row_length`);
# packed_full: every row --length tokens (how packing first packed).
PACKING_MODES = ("unpacked", "packed", "packed_full")
# Pairs the vocabularies of a --pairs_file run are learned from (Multi30k's training set).
VOCAB_PAIRS = 29_000


def read_pairs(path):
  """(sources, targets) of a source<TAB>target file; a bad line is a UsageError."""
  sources, targets = [], []
  with open(path, encoding="utf-8") as f:
    for number, line in enumerate(f, 1):
      fields = line.rstrip("\n").split("\t")
      if len(fields) != 2:
        raise cli.UsageError(f"{path}:{number}: expected source<TAB>target")
      sources.append(fields[0])
      targets.append(fields[1])
  if not sources:
    raise cli.UsageError(f"{path}: no pairs")
  return sources, targets


def _learn_tokenizer(texts, vocab_size, directory, side):
  strings = tf.data.Dataset.from_tensor_slices(texts)
  path = tokenizer.learn_and_write(
    tokenizer.SENTENCEPIECE, strings, vocab_size, os.path.join(directory, side), False, VOCAB_PAIRS
  )
  return text.load_tokenizer(path)


def _batch_counts(batches):
  """(real target tokens, real share of both sides' tokens, pairs a row, the commonest row
  length) of a pass."""
  share, pairs, rows = packing.real_token_share(
    tf.data.Dataset.from_generator(
      lambda: iter(batches),
      output_signature={name: tf.TensorSpec([None, None], tf.int32) for name in batches[0]},
    )
  )
  target = sum(int(tf.math.count_nonzero(b["target_out"])) for b in batches)
  lengths = [int(b["source"].shape[1]) for b in batches]
  return target, share, pairs / rows, max(set(lengths), key=lengths.count)


def measure_packing(
  pairs_file,
  config_name="small",
  dtype="float32",
  steps=3,
  rounds=3,
  batch_size=64,
  length=64,
  xla_modes=XLA_MODES,
):
  """Times tfattn's training step over `steps` batches of the pairs, unpacked and packed, at
  each XLA mode, interleaved. Returns a dict: "device", "config", "pairs", and "variants":
  [{"mode", "xla", "seconds_per_pass", "real_target_tokens_per_second",
  "cpu_seconds_per_pass", "real_target_tokens_per_cpu_second", "real_share",
  "pairs_per_row", "row_length"}] (row_length: the commonest padded length of its batches)."""
  c = CONFIGS[config_name]
  sources, targets = read_pairs(pairs_file)
  with tempfile.TemporaryDirectory() as directory:
    source_tokenizer = _learn_tokenizer(sources, c["vocab"], directory, "source")
    target_tokenizer = _learn_tokenizer(targets, c["vocab"], directory, "target")
  raw = tf.data.Dataset.from_tensor_slices((sources, targets))
  config = _transformer_config(
    c, source_tokenizer.vocab_size, target_tokenizer.vocab_size, length, dtype
  )
  model, kind = tfattn.Transformer(config), kinds.Seq2Seq()
  variables = model.trainable_variables
  timed, counts, cpu, steps_made = {}, {}, {}, {}
  for xla in xla_modes:
    for mode in PACKING_MODES:
      batches = list(
        data.seq2seq_dataset(
          raw,
          source_tokenizer,
          target_tokenizer,
          batch_size=batch_size,
          max_length=length,
          shuffle_seed=0,
          repeat=True,
          drop_remainder=True,
          batch_tokens=batch_size * length,  # the same padded tokens a batch, both ways
          pad_to_bucket=xla == "on",  # as the trainer batches under XLA
          pack=mode != "unpacked",
          pack_row_length=length if mode == "packed_full" else None,
        ).take(steps)
      )
      counts[mode, xla] = _batch_counts(batches)
      # packed and packed_full batches hold the same fields: one step function (one trace)
      # serves both; XLA still compiles each row length it meets.
      fields = (xla, tuple(sorted(batches[0])))
      if fields not in steps_made:
        optimizer = keras.optimizers.Adam(1e-4, beta_1=0.9, beta_2=0.98, epsilon=1e-9)
        optimizer.build(variables)
        steps_made[fields] = _packing_step(kind, model, optimizer, batches[0], xla == "on")
      step = steps_made[fields]
      timed[mode, xla] = _with_cpu_time(
        lambda step=step, batches=batches: [step(b) for b in batches][-1].numpy(),
        cpu.setdefault((mode, xla), []),
      )
  seconds = common.interleaved_medians(timed, rounds, 1)
  cpu_seconds = {key: statistics.median(values[1:]) for key, values in cpu.items()}  # [0]: compile
  return {
    "device": common.device_description(),
    "config": dict(name=config_name, dtype=dtype, batch=batch_size, length=length, **c),
    "pairs": len(sources),
    "steps": steps,
    "rounds": rounds,
    "variants": [
      {
        "mode": mode,
        "xla": xla,
        "seconds_per_pass": value,
        "real_target_tokens_per_second": counts[mode, xla][0] / value,
        "cpu_seconds_per_pass": cpu_seconds[mode, xla],
        "real_target_tokens_per_cpu_second": counts[mode, xla][0] / cpu_seconds[mode, xla],
        "real_share": counts[mode, xla][1],
        "pairs_per_row": counts[mode, xla][2],
        "row_length": counts[mode, xla][3],
      }
      for (mode, xla), value in seconds.items()
    ],
  }


def _with_cpu_time(fn, samples):
  """fn, appending the process CPU seconds of each call to `samples`: on a machine other jobs
  share, CPU time counts the work done and wall time also the waiting (both are reported)."""

  def run():
    start = time.process_time()
    result = fn()
    samples.append(time.process_time() - start)
    return result

  return run


def _packing_step(kind, model, optimizer, example_batch, jit):
  """One training step on a batch dict (packed or not): the trainer's loss, mean per token."""
  variables = model.trainable_variables
  signature = {name: tf.TensorSpec([None, None], tf.int32) for name in example_batch}

  @tf.function(input_signature=[signature], jit_compile=jit, autograph=False)
  def step(batch):
    with tf.GradientTape() as tape:
      sums = kind.loss_sums(model, batch, 0.1)
      loss = sums.loss / tf.maximum(sums.count, 1.0)
    optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
    return loss

  return step


def _ratios_by_xla(result, role, rate, over, under):
  """{"XLA off": variant `over`'s / variant `under`'s `rate`, ...} for the XLA modes where both
  were measured; variants are told apart by their `role` field."""
  by = {(v[role], v["xla"]): v[rate] for v in result["variants"]}
  return {
    f"XLA {xla}": by[over, xla] / by[under, xla]
    for xla in XLA_MODES
    if (over, xla) in by and (under, xla) in by
  }


def packing_ratios(result, packed="packed", rate="real_target_tokens_per_second"):
  """{"XLA off": `packed` / unpacked real target tokens/s (or another `rate`), ...}."""
  return _ratios_by_xla(result, "mode", rate, packed, "unpacked")


def _print_packing(args, xla_modes):
  result = measure_packing(
    args.pairs_file,
    args.config,
    args.dtype,
    args.steps,
    args.rounds,
    args.batch,
    args.length,
    xla_modes,
  )
  c = result["config"]
  print(f"device: {result['device']}")
  print(
    f"config: {args.config} ({c['num_layers']}+{c['num_layers']} layers, d_model "
    f"{c['d_model']}, {c['num_heads']} heads, dff {c['dff']}), {args.dtype}; "
    f"{result['pairs']} pairs from {args.pairs_file}; each batch at most {args.batch} x "
    f"{args.length} padded tokens a side; median of {args.rounds} interleaved rounds of "
    f"{args.steps} steps\n"
  )
  print(
    f"{'mode':<11} {'XLA':<5} {'s/pass':>8} {'real target tok/s':>18} {'CPU s/pass':>11} "
    f"{'tok/CPU s':>10} {'real share':>11} {'pairs/row':>10} {'row length':>11}"
  )
  for v in result["variants"]:
    print(
      f"{v['mode']:<11} {v['xla']:<5} {v['seconds_per_pass']:8.3f} "
      f"{v['real_target_tokens_per_second']:18.0f} {v['cpu_seconds_per_pass']:11.3f} "
      f"{v['real_target_tokens_per_cpu_second']:10.0f} {v['real_share']:11.3f} "
      f"{v['pairs_per_row']:10.2f} {v['row_length']:11d}"
    )
  print()
  cpu_rate = "real_target_tokens_per_cpu_second"
  for packed, what in (("packed", "packed"), ("packed_full", "packed_full (rows of --length)")):
    by_cpu = packing_ratios(result, packed, cpu_rate)
    for name, ratio in packing_ratios(result, packed).items():
      print(
        f"ratio {what} / unpacked real target tokens, {name}: {ratio:.2f}x per second, "
        f"{by_cpu[name]:.2f}x per CPU second"
      )


def _keras_peer(c, dtype, batch):
  """The peer under Keras' mixed_bfloat16 policy when asked for bfloat16 (variables float32),
  built on the first batch; the global policy is restored after."""
  previous = keras.mixed_precision.global_policy()
  if dtype == "bfloat16":
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
  try:
    peer = KerasTransformer(c["num_layers"], c["d_model"], c["num_heads"], c["dff"], c["vocab"])
    peer((batch[0], batch[1]))  # build
  finally:
    keras.mixed_precision.set_global_policy(previous)
  return peer


def ratios(result):
  """{"XLA on": tfattn / keras_mha tokens/s, ...} for the XLA modes where both were measured."""
  return _ratios_by_xla(result, "model", "target_tokens_per_second", "tfattn", "keras_mha")


def main(argv):
  del argv  # cli.run refuses positional arguments
  from absl import flags

  args = flags.FLAGS
  models, xla_modes = args.models, args.xla
  unknown = sorted(set(models) - set(MODELS)) + sorted(set(xla_modes) - set(XLA_MODES))
  if unknown:
    raise cli.UsageError(f"unknown --models or --xla values {unknown}: see --help")
  if args.pairs_file:
    if not os.path.isfile(args.pairs_file):
      raise cli.UsageError(f"--pairs_file={args.pairs_file}: no such file")
    _print_packing(args, list(dict.fromkeys(xla_modes)))
    return
  result = measure(
    args.config,
    args.dtype,
    args.steps,
    args.rounds,
    args.batch,
    args.length,
    models=list(dict.fromkeys(models)),
    xla_modes=list(dict.fromkeys(xla_modes)),
  )
  c, peak, step_flops = result["config"], result["peak_flops"], result["step_flops"]
  print(f"device: {result['device']}")
  print(
    f"config: {args.config} ({c['num_layers']}+{c['num_layers']} layers, d_model "
    f"{c['d_model']}, {c['num_heads']} heads, dff {c['dff']}, vocab {c['vocab']}), "
    f"{args.dtype}, batch {args.batch}, length {args.length}; median of {args.rounds} "
    f"interleaved rounds of {args.steps} steps"
  )
  print(
    f"measured {args.dtype} matmul peak: {performance.format_flops(peak)}; "
    f"training FLOPs/step: {step_flops / 1e9:.1f} GFLOP\n"
  )
  print(
    f"{'model':<10} {'XLA':<5} {'s/step':>8} {'target tok/s':>13} {'MFU':>6}   "
    "(tfattn_ffd: + dropout on the feed-forward hidden layer)"
  )
  tokens = {}
  for v in result["variants"]:
    tokens[v["model"], v["xla"]] = v["target_tokens_per_second"]
    print(
      f"{v['model']:<10} {v['xla']:<5} {v['seconds_per_step']:8.3f} "
      f"{v['target_tokens_per_second']:13.0f} {performance.format_mfu(v['mfu']):>6}"
    )
  print()
  for name, ratio in ratios(result).items():
    print(f"ratio tfattn / keras_mha, {name}: {ratio:.2f}x")
  for xla in XLA_MODES:
    if ("tfattn_ffd", xla) in tokens and ("tfattn", xla) in tokens:
      print(
        f"cost of feed-forward hidden dropout, XLA {xla}: tfattn_ffd / tfattn = "
        f"{tokens['tfattn_ffd', xla] / tokens['tfattn', xla]:.2f}x tok/s"
      )


if __name__ == "__main__":
  cli.run(main)  # its flags defined above
