"""Dropout cost, side by side in one run: forward + backward of dropout on a [rows, width]
activation, with and without XLA, for the mask recipes a Transformer can use.

  python benchmarks/dropout_cost.py [--rows 4096] [--width 1024]

Variants: the pre-issue-9 tfattn dropout (Philox chosen by TF, float mask, multiply and
divide), the same draw with a boolean mask and one `where`, and the `where` mask drawn with
ThreeFry (XLA only) and with Philox named explicitly. Prints seconds per call and each one's
ratio to the first.
"""

# ruff: noqa: E402 (TensorFlow is imported below the flag check, so a mistake costs no start)

import cli
import common

import dataclasses

from settings import setting


@dataclasses.dataclass(frozen=True)
class DropoutCostFlags:
  """The flags of `benchmarks/dropout_cost.py`."""

  rows: int = setting(4096, "Rows of the input.", minimum=1)
  width: int = setting(1024, "Columns of the input.", minimum=1)
  rounds: int = setting(5, "Interleaved rounds (the median is reported).", minimum=1)
  repeats: int = setting(5, "Calls timed per round.", minimum=1)


def _define_flags():

  cli.define_flags(DropoutCostFlags)


if __name__ == "__main__":
  _define_flags()
  cli.check_flags_now()  # a mistake is one line before TensorFlow's start
  cli.start_tensorflow_quietly()  # before TensorFlow is imported below

import tensorflow as tf

RATE = 0.1


def float_mask(x, seed):  # tfattn before issue 9
  keep = tf.random.stateless_uniform(tf.shape(x), seed, dtype=tf.float32) >= RATE
  return x * tf.cast(keep, x.dtype) / tf.cast(1.0 - RATE, x.dtype)


def where_mask(alg):
  def drop(x, seed):
    keep = tf.random.stateless_uniform(tf.shape(x), seed, dtype=tf.float32, alg=alg) >= RATE
    return tf.where(keep, x * tf.cast(1.0 / (1.0 - RATE), x.dtype), tf.zeros_like(x))

  return drop


VARIANTS = {
  "float mask, auto alg": float_mask,
  "where, auto alg": where_mask("auto_select"),
  "where, threefry": where_mask("threefry"),
  "where, philox": where_mask("philox"),
}


def main(argv):
  del argv  # cli.run refuses positional arguments
  from absl import flags

  args = flags.FLAGS
  x = tf.Variable(tf.random.normal([args.rows, args.width]))
  rng = tf.random.Generator.from_seed(0)
  functions = {}
  for jit in (False, True):
    for name, drop in VARIANTS.items():
      if "threefry" in name and not jit:
        continue  # TensorFlow's CPU/GPU kernels implement ThreeFry only under XLA

      @tf.function(jit_compile=jit, autograph=False)
      def step(drop=drop):
        with tf.GradientTape() as tape:
          y = drop(x, rng.make_seeds(1)[:, 0])
          loss = tf.reduce_sum(y * y)
        return tf.reduce_sum(tape.gradient(loss, x))  # all of it: XLA prunes unused work

      functions[name, jit] = lambda step=step: step().numpy()
  seconds = common.interleaved_medians(functions, args.rounds, args.repeats)
  print(
    f"device: {common.device_description()}; dropout {RATE} on [{args.rows}, {args.width}] "
    f"float32, forward + backward; median of {args.rounds} interleaved rounds"
  )
  for jit in (False, True):
    base = seconds[next(iter(VARIANTS)), jit]
    for name in VARIANTS:
      if (name, jit) not in seconds:
        continue
      value = seconds[name, jit]
      print(
        f"XLA {'on ' if jit else 'off'}  {name:<22} {value * 1e3:8.2f} ms  "
        f"{base / value:5.2f}x the first"
      )


if __name__ == "__main__":
  cli.run(main)  # its flags defined above
