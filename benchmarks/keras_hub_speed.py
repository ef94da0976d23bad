"""Speed against today's peer: tfattn's `LanguageModel` and keras-hub 0.32's GPT-2
(`GPT2Backbone` + `GPT2CausalLM`) at the same dimensions, random weights, side by side in one
run: training tokens/s (one Adam step of next-token cross-entropy, XLA on both) and greedy
`generate` tokens/s at batch 1 and 32 (XLA on both), with the ratios ours / keras-hub.

  make bench-keras-hub                      # installs requirements-keras-hub.txt, runs this
  python benchmarks/keras_hub_speed.py [--size=cpu|gpu|tiny] [--rounds=5] [--modes=train,generate]

keras-hub is not in requirements.txt: `pip install -r requirements-keras-hub.txt` brings it
(it adds packages and changes none of our pins).

What each side runs (chosen so that both do the same work; see docs/benchmarks.md):
  * The models: our config is GPT-2's layout (pre-norm, learned positions, the embedding tied
    to the output and not scaled, GELU in its tanh form, dropout 0) at the size's layers,
    heads, width, feed-forward width, vocabulary and max length. (Until 2026-11-27b ours ran
    ReLU and a sqrt(d_model) embedding scale: a cheaper feed-forward than keras-hub's.)
  * Training, ours: the trainer's own loop (`train.trainer.make_train_loop`, as `python -m
    train --jit_compile` runs it on one device): `--steps` optimizer steps in one call, each
    step one XLA program (the gradient of `train.kinds.LanguageModeling.loss_sums`, the
    trainer's loss and accuracy sums, and Keras' Adam update). "tfattn, update outside XLA" is
    the trainer's layout with several replicas: XLA gradients, the update after them outside
    XLA, one call a step.
  * Training, keras-hub: `GPT2CausalLM.compile(jit_compile=True)` (its default loss, sparse
    cross-entropy from logits, and its default weighted accuracy), timed in `fit`'s loop
    (`steps_per_execution=--steps`: the compiled `train_function` over an iterator, as `fit`
    calls it) and, one call a step, through `train_on_batch`; the ratios are against the
    loop. Both read `length` positions per row and predict the next token at each.
  * Generation, ours: `LanguageModel.start_decoding(padded=True)` (the prompt prefilled in one
    pass, a fixed-size cache) and `decoding.token_loop`, greedy, in one
    `tf.function(jit_compile=True)`, as the XLA export decodes. The start's `eos_id` is set to
    -1, so no row stops early (keras-hub's `stop_token_ids=None`).
  * Generation, keras-hub: `GPT2CausalLM.generate({"token_ids", "padding_mask"},
    stop_token_ids=None)` without a preprocessor (token ids in, token ids out: no tokenizer,
    nothing downloaded), greedy sampler, compiled with `jit_compile=True`. Its prompts are
    padded to `prompt_length + new_tokens`; it fills every padded slot.
  * Both read the same prompt of `prompt_length` random ids (ours puts BOS before it) and write
    `new_tokens` tokens a row. Timed after a warm-up call (compilation), in interleaved rounds;
    the medians are reported.
"""

import cli
import common

import dataclasses
import importlib.util
from typing import List

from settings import setting

EXTRA_REQUIREMENTS = "requirements-keras-hub.txt"

SIZES = {
  # A few milliseconds a step: for the benchmark's test, not for figures.
  "tiny": dict(layers=1, heads=2, width=16, ff=32, vocab=40, max_length=16, batch=2, prompt=4),
  # nanoGPT's shakespeare_char CPU config: 4 layers, 4 heads, width 128, block 64, batch 12;
  # its character vocabulary has 65 symbols.
  "cpu": dict(layers=4, heads=4, width=128, ff=512, vocab=65, max_length=64, batch=12, prompt=16),
  # nanoGPT's shakespeare_char GPU config (6 layers, 6 heads, width 384, block 256); the batch
  # kept at 12 (nanoGPT's GPU run: 64) to fit a 2-core CPU.
  "gpu": dict(layers=6, heads=6, width=384, ff=1536, vocab=65, max_length=256, batch=12, prompt=64),
}
MODES = ("train", "generate")


@dataclasses.dataclass(frozen=True)
class KerasHubSpeedFlags:
  """The flags of `benchmarks/keras_hub_speed.py`."""

  size: str = setting("cpu", "Model size and batch: see SIZES.", choices=tuple(SIZES))
  modes: List[str] = setting(tuple(MODES), "What to time, a comma list: train, generate.")
  generate_batches: List[int] = setting((1, 32), "Generate: rows per batch, a comma list.")
  rounds: int = setting(7, "Interleaved rounds (the median is reported).", minimum=1)
  steps: int = setting(
    3,
    "Train: optimizer steps per round: one call of each loop (the trainer's --steps_per_loop, "
    "Keras' steps_per_execution), one call a step of the others.",
    minimum=1,
  )
  repeats: int = setting(3, "Generate: calls per round.", minimum=1)


def _define_flags():
  cli.define_flags(KerasHubSpeedFlags)


def keras_hub_missing() -> str:
  """Why keras-hub cannot be used here ("" when it can), without importing it."""
  if importlib.util.find_spec("keras_hub") is None:
    return (
      f"keras-hub is not installed: pip install -r {EXTRA_REQUIREMENTS} (or make bench-keras-hub)"
    )
  return ""


def our_config(size):
  """The `TransformerConfig` of a size, in GPT-2's layout."""
  import tfattn

  s = SIZES[size]
  return tfattn.TransformerConfig(
    source_vocab_size=s["vocab"],
    target_vocab_size=s["vocab"],
    d_model=s["width"],
    num_heads=s["heads"],
    dff=s["ff"],
    num_encoder_layers=0,
    num_decoder_layers=s["layers"],
    dropout_rate=0.0,
    max_length=s["max_length"],
    position_encoding="learned",
    norm_position="pre",
    tie_output_embedding=True,
    activation="gelu_tanh",  # GPT-2's, as keras-hub's GPT2Backbone
    embedding_init="gpt2",  # lookups not scaled by sqrt(d_model), as GPT-2
  )


def peer_model(size, steps_per_execution=1):
  """keras-hub's `GPT2CausalLM` of a size: random weights, no preprocessor (token ids in and
  out), compiled as `compile` documents with Adam, the greedy sampler, XLA and
  `steps_per_execution`."""
  import keras
  import keras_hub

  s = SIZES[size]
  backbone = keras_hub.models.GPT2Backbone(
    vocabulary_size=s["vocab"],
    num_layers=s["layers"],
    num_heads=s["heads"],
    hidden_dim=s["width"],
    intermediate_dim=s["ff"],
    dropout=0.0,
    max_sequence_length=s["max_length"],
  )
  peer = keras_hub.models.GPT2CausalLM(backbone, preprocessor=None)
  peer.compile(
    optimizer=_adam(keras),
    sampler="greedy",
    jit_compile=True,
    steps_per_execution=steps_per_execution,
  )
  return peer


def _adam(keras):
  return keras.optimizers.Adam(1e-4, beta_1=0.9, beta_2=0.98, epsilon=1e-9)


def train_steps(model, peer, peer_loop, batch_ids, steps):
  """{name: a function running `steps` optimizer steps and waiting for them}, on `batch_ids`
  int32 `[batch, max_length - 1]` (ours: BOS + ids -> ids + EOS; keras-hub: the same length).
  `peer_loop`: keras-hub's model compiled with `steps_per_execution=steps`."""
  import keras
  import tensorflow as tf

  from train import kinds, trainer

  lm = kinds.LanguageModeling()
  variables = model.trainable_variables

  def optimizer():
    adam = _adam(keras)
    adam.build(variables)
    return adam

  # The trainer's own loop (`python -m train --jit_compile` on one device): `steps` steps in
  # one call, each step one XLA program, batches read from an iterator inside the loop.
  train_loop = trainer.make_train_loop(
    model, lm, optimizer(), tf.distribute.get_strategy(), jit_compile=True
  )
  our_batches = iter(tf.data.Dataset.from_tensors({"source": batch_ids}).repeat())
  steps_tensor = tf.constant(steps)

  def gradients(ids):
    with tf.GradientTape() as tape:
      sums = lm.loss_sums(model, {"source": ids}, 0.0)
      mean = sums.loss / tf.maximum(sums.count, 1.0)
    return tape.gradient(mean, variables), sums

  xla_gradients = tf.function(gradients, jit_compile=True, autograph=False)
  outside_adam = optimizer()

  @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)], autograph=False)
  def outside_step(ids):  # the trainer's layout with several replicas: the update outside
    grads, sums = xla_gradients(ids)
    outside_adam.apply_gradients(zip(grads, variables))
    return sums.loss

  # keras-hub: inputs and next-token targets of the same `length` positions as ours.
  rows, length = batch_ids.shape[0], batch_ids.shape[1] + 1
  bos = tf.fill([rows, 1], 1)
  full = tf.concat([bos, batch_ids, tf.fill([rows, 1], 2)], 1)  # [rows, length + 1]
  x = {"token_ids": full[:, :-1], "padding_mask": tf.ones([rows, length], tf.int32)}
  y = full[:, 1:]
  # What `fit` calls once per `steps_per_execution` steps: its compiled multi-step function.
  peer_loop.make_train_function()
  peer_batches = iter(tf.data.Dataset.from_tensors((x, y)).repeat())

  def each_step(step):
    def run():
      for _ in range(steps):
        step()

    return run

  return {
    "tfattn": lambda: train_loop(our_batches, steps_tensor)[0].loss.numpy(),
    "tfattn, update outside XLA": each_step(lambda: outside_step(batch_ids).numpy()),
    "keras-hub": lambda: peer_loop.train_function(peer_batches),
    "keras-hub, train_on_batch": each_step(lambda: peer.train_on_batch(x, y)),
  }


def generate_calls(model, peer, prompts, new_tokens):
  """{name: a function generating `new_tokens` greedy tokens after each of `prompts` int32
  `[batch, prompt_length]` and returning them}."""
  import numpy as np
  import tensorflow as tf

  from tfattn import decoding
  from tfattn.decode_options import GREEDY, DecodeOptions

  options = DecodeOptions(strategy=GREEDY, max_decode_length=new_tokens)

  @tf.function(
    input_signature=[tf.TensorSpec([None, None], tf.int32)], jit_compile=True, autograph=False
  )
  def ours(prompt):
    start = model.start_decoding(prompt, options, padded=True)
    return decoding.token_loop(start._replace(eos_id=-1), options).ids  # no early stop

  rows, prompt_length = prompts.shape
  token_ids = np.zeros([rows, prompt_length + new_tokens], np.int32)
  token_ids[:, :prompt_length] = prompts
  peer_inputs = {"token_ids": token_ids, "padding_mask": token_ids != 0}
  return {
    "tfattn": lambda: ours(prompts).numpy(),
    "keras-hub": lambda: peer.generate(peer_inputs, stop_token_ids=None)["token_ids"],
  }


def interleaved_samples(functions, rounds, repeats):
  """{name: [seconds per call, one a round]}, timing the functions in turn, round after round
  (as `common.interleaved_medians`, keeping every round: a round's ratio compares calls made
  moments apart on a shared machine). Each function is called once first (compilation)."""
  for fn in functions.values():
    fn()
  samples = {name: [] for name in functions}
  for _ in range(rounds):
    for name, fn in functions.items():
      samples[name].append(common.timed(fn, repeats, warm_up=False))
  return samples


def _rates(samples, tokens):
  """{name: {"tokens_per_second": at the median time, "round_ratios": [keras-hub's time /
  this one's, a round]}} (keras-hub's own ratios are all 1)."""
  import statistics

  peer = samples["keras-hub"]
  return {
    name: {
      "tokens_per_second": tokens / statistics.median(values),
      "round_ratios": [theirs / ours for ours, theirs in zip(values, peer)],
    }
    for name, values in samples.items()
  }


def measure(size="cpu", modes=MODES, generate_batches=(1, 32), rounds=5, steps=3, repeats=3):
  """Times every mode asked for, interleaved. Returns {"device", "size": the SIZES entry + its
  name, "train": {name: rates}, "generate": {batch: {name: rates}}, "checks": {batch: {name:
  every row got its new tokens}}}; rates: {"tokens_per_second" (batch x length, or batch x new
  tokens, over the median seconds), "round_ratios" (ours / keras-hub tokens/s, each round)}."""
  import numpy as np
  import tensorflow as tf

  import tfattn

  s = SIZES[size]
  new_tokens = s["max_length"] - s["prompt"]
  model = tfattn.LanguageModel(our_config(size))
  peer = peer_model(size)
  rng = np.random.default_rng(0)
  result = {"device": common.device_description(), "size": dict(name=size, **s), "checks": {}}
  if "train" in modes:
    ids = tf.constant(rng.integers(4, s["vocab"], [s["batch"], s["max_length"] - 1]), tf.int32)
    calls = train_steps(model, peer, peer_model(size, steps), ids, steps)
    samples = interleaved_samples(calls, rounds, 1)  # each call runs `steps` steps
    result["train"] = _rates(samples, steps * s["batch"] * s["max_length"])
  if "generate" in modes:
    result["generate"] = {}
    for rows in generate_batches:
      prompts = rng.integers(4, s["vocab"], [rows, s["prompt"]]).astype(np.int32)
      calls = generate_calls(model, peer, prompts, new_tokens)
      # Both write new_tokens real tokens a row (no padding left, none before the prompt).
      ours, theirs = calls["tfattn"](), calls["keras-hub"]()
      result["checks"][rows] = {
        # No row can stop early (eos_id -1), so every slot holds a chosen token; id 0 is one
        # a random model may choose (with GELU and GPT-2's embeddings it does at batch 32).
        "tfattn": ours.shape == (rows, new_tokens),
        "keras-hub": bool(np.array_equal(theirs[:, : s["prompt"]], prompts))
        and theirs.shape[1] == s["prompt"] + new_tokens,
      }
      samples = interleaved_samples(calls, rounds, repeats)
      result["generate"][rows] = _rates(samples, rows * new_tokens)
  return result


def _table(rates, labels):
  print(f"  {'model':<44} {'tokens/s':>9} {'ours / keras-hub':>17} {'rounds: min-max':>16}")
  for name, rate in rates.items():
    ratio = spread = ""
    if name != "keras-hub":
      ratio = f"{rate['tokens_per_second'] / rates['keras-hub']['tokens_per_second']:.2f}x"
      spread = f"{min(rate['round_ratios']):.2f}-{max(rate['round_ratios']):.2f}x"
    print(f"  {labels[name]:<44} {rate['tokens_per_second']:9.0f} {ratio:>17} {spread:>16}")


def report(result, rounds, steps, repeats):
  s = result["size"]
  new_tokens = s["max_length"] - s["prompt"]
  print(f"device: {result['device']}")
  print(
    f"size {s['name']}: {s['layers']} layers, {s['heads']} heads, width {s['width']}, ff "
    f"{s['ff']}, vocabulary {s['vocab']}, max length {s['max_length']}, dropout 0; random "
    f"weights; tokens/s at the median of {rounds} interleaved rounds, and the range of the "
    "rounds' own ratios"
  )
  if "train" in result:
    print(
      f"\ntraining: one Adam step of next-token cross-entropy, batch {s['batch']} x "
      f"{s['max_length']} positions, XLA ({steps} steps a round: one call of the loops, "
      "one call a step of the others)"
    )
    labels = {
      "tfattn": "tfattn trainer's loop (an XLA program a step)",
      "tfattn, update outside XLA": "tfattn replicas' layout (Adam after XLA)",
      "keras-hub": "keras-hub fit's loop (steps_per_execution)",
      "keras-hub, train_on_batch": "keras-hub train_on_batch",
    }
    _table(result["train"], labels)
  for rows, rates in result.get("generate", {}).items():
    checks = result["checks"][rows]
    print(
      f"\ngenerate: greedy, batch {rows}, prompt {s['prompt']} ids + {new_tokens} new tokens "
      f"a row, XLA, {repeats} calls a round (outputs checked: "
      + ", ".join(f"{k} {'ok' if v else 'WRONG'}" for k, v in checks.items())
      + ")"
    )
    labels = {
      "tfattn": "tfattn start_decoding(padded) + token_loop",
      "keras-hub": "keras-hub GPT2CausalLM.generate",
    }
    _table(rates, labels)


def main(argv):
  del argv  # cli.run refuses positional arguments
  from absl import flags

  args = flags.FLAGS
  unknown = sorted(set(args.modes) - set(MODES))
  if unknown:
    raise cli.UsageError(f"unknown --modes {unknown}: choose from {', '.join(MODES)}")
  batches = [str(rows) for rows in args.generate_batches]  # absl's list flags hold strings
  if not all(rows.isdigit() and int(rows) > 0 for rows in batches):
    raise cli.UsageError(f"--generate_batches must be positive integers, got {batches}")
  missing = keras_hub_missing()
  if missing:
    raise cli.UsageError(missing)
  cli.start_tensorflow_quietly()
  modes = list(dict.fromkeys(args.modes))
  result = measure(
    args.size, modes, [int(rows) for rows in batches], args.rounds, args.steps, args.repeats
  )
  report(result, args.rounds, args.steps, args.repeats)


if __name__ == "__main__":
  _define_flags()
  cli.run(main)
