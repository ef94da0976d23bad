"""A training checkpoint's cost, side by side in one run: the default task's Trainer saving its
weights, optimizer and input position, with the training examples read in a seeded permutation
(what training does when their number is known) and through the shuffle buffer a streamed
source of unknown size gets (`train.data.STREAM_SHUFFLE_BUFFER` slots, all of them saved).
Training is blocked while a save runs: the checkpoint dip of `make gpu-pass`.

  python benchmarks/checkpoint_cost.py [--examples 50000] [--rounds 5] [--batches 20]

Each round draws --batches batches from each Trainer's input, then times one save of each, in
turn. Prints the median wall and CPU seconds of a save, the checkpoint's size, and the ratios.
"""

# ruff: noqa: E402 (TensorFlow is imported below the flag check, so a mistake costs no start)

import cli
import common

import dataclasses
from typing import Optional

from settings import setting


@dataclasses.dataclass(frozen=True)
class CheckpointCostFlags:
  """The flags of `benchmarks/checkpoint_cost.py`."""

  examples: int = setting(50_000, "Training examples of the built-in task.", minimum=100)
  rounds: int = setting(5, "Saves of each Trainer, in turn (the median is reported).", minimum=1)
  batches: int = setting(20, "Batches drawn before each save.", minimum=1)
  model: Optional[str] = setting(None, "Model preset (default: the run's default).")


def _define_flags():
  cli.define_flags(CheckpointCostFlags)


if __name__ == "__main__":
  _define_flags()
  cli.check_flags_now()  # a mistake is one line before TensorFlow's start
  cli.start_tensorflow_quietly()  # before TensorFlow is imported below

import os
import statistics
import tempfile
import time

# The two ways a Trainer reads its training examples.
VARIANTS = ("permuted", "shuffle buffer")


def trainers(args, work_dir):
  """{variant: Trainer} of the default task (prepared once), each in its own run directory under
  `work_dir`."""
  from train.run_config import RunConfig
  from train.trainer import Trainer, prepare

  overrides = {"model": args.model} if args.model else {}
  config = RunConfig.of(builtin_train_examples=args.examples, attention_images=0, **overrides)
  config, task, strategy = prepare(config)
  streamed = dataclasses.replace(task, train=lambda: task.train().filter(lambda *_: True))
  tasks = {"permuted": task, "shuffle buffer": streamed}  # unknown size: shuffled's buffer
  return {
    variant: Trainer(
      config.replace(run_dir=os.path.join(work_dir, variant.replace(" ", "_"))),
      tasks[variant],
      strategy,
    )
    for variant in VARIANTS
  }


def _megabytes(prefix):
  """The size of the checkpoint files of `prefix` (its index and data shards)."""
  folder, name = os.path.split(prefix)
  files = [f for f in os.listdir(folder) if f.startswith(name + ".")]
  return sum(os.path.getsize(os.path.join(folder, f)) for f in files) / 1e6


def save_costs(args, work_dir):
  """{variant: {"wall_s", "cpu_s", "megabytes"}}: medians over the rounds."""
  runs = trainers(args, work_dir)
  samples = {variant: [] for variant in VARIANTS}
  for number in range(1, args.rounds + 1):
    for variant, trainer in runs.items():
      for _ in range(args.batches):
        trainer.iterator.get_next()
      cpu, wall = time.process_time(), time.perf_counter()
      prefix = trainer.manager.save(checkpoint_number=number)
      seconds = (time.perf_counter() - wall, time.process_time() - cpu)
      samples[variant].append((*seconds, _megabytes(prefix)))
  return {
    variant: {
      key: statistics.median(sample[i] for sample in values)
      for i, key in enumerate(("wall_s", "cpu_s", "megabytes"))
    }
    for variant, values in samples.items()
  }


def main(argv):
  del argv  # cli.run refuses positional arguments
  from absl import flags

  args = flags.FLAGS
  with tempfile.TemporaryDirectory(prefix="checkpoint-cost-") as work_dir:  # removed after
    costs = save_costs(args, work_dir)
  print(
    f"device: {common.device_description()}; the default task with {args.examples:,} training "
    f"examples, a save after every {args.batches} batches; median of {args.rounds} rounds"
  )
  for variant, cost in costs.items():
    print(
      f"{variant:<15} save {cost['wall_s']:6.3f} s wall, {cost['cpu_s']:6.3f} CPU s, "
      f"{cost['megabytes']:6.1f} MB"
    )
  permuted, buffered = costs["permuted"], costs["shuffle buffer"]
  print(
    f"shuffle buffer / permuted: {buffered['wall_s'] / permuted['wall_s']:.2f}x the wall time, "
    f"{buffered['megabytes'] / permuted['megabytes']:.2f}x the size"
  )


if __name__ == "__main__":
  cli.run(main)  # its flags defined above
