"""train.optimizer: Adam or AdamW (decoupled decay on matrices only) and the schedule."""

import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from tfattn import layers
from train import optimizer as optimizers
from train.run_config import RunConfig

from train_helpers import REPO, environment


class _Toy(tf.Module):
  """A Linear (kernel and bias) and a LayerNorm (scale and offset): every rank of variable."""

  def __init__(self):
    super().__init__(name="toy")
    with self.name_scope:
      self.linear = layers.Linear(4, 3, seed=1, name="linear")
      self.norm = layers.LayerNorm(3, name="norm")
      self.norm.offset.assign([0.5, -0.5, 1.0])  # nonzero: a decay would show
    self.linear.bias.assign([0.1, 0.2, 0.3])


def _config(**changes):
  values = dict(
    schedule="constant",
    learning_rate=0.1,
    warmup_steps=0,
    train_steps=10,
    optimizer="adamw",
    weight_decay=0.5,
    mixed_precision="float32",
  )
  return RunConfig.of(**{**values, **changes}).resolved()


def _one_zero_gradient_step(config, strategy=None):
  """Builds the run's optimizer for a toy module and applies zero gradients once: Adam's own
  update is then 0, so what changes is the weight decay alone. -> {name: (before, after)}."""
  strategy = strategy or tf.distribute.get_strategy()
  with strategy.scope():
    toy = _Toy()
    variables = toy.trainable_variables
    optimizer = optimizers.make_optimizer(
      config.optimizer,
      8,
      variables,
      train_steps=config.loop.train_steps,
      loss_scaled=config.device.loss_scaled,
    )
  before = [v.numpy() for v in variables]

  def step():
    optimizer.apply_gradients([(tf.zeros_like(v), v) for v in variables])

  strategy.run(tf.function(step, autograph=False))
  return {v.name: (b, v.numpy()) for v, b in zip(variables, before)}


@pytest.mark.parametrize("mirrored", [False, True])
def test_adamw_decays_matrices_but_not_biases_or_norms(mirrored):
  strategy = tf.distribute.MirroredStrategy(["/cpu:0"]) if mirrored else None
  changed = _one_zero_gradient_step(_config(), strategy)
  assert len(changed) == 4
  for name, (before, after) in changed.items():
    if "kernel" in name:  # w <- w - lr * weight_decay * w
      np.testing.assert_allclose(after, before * (1 - 0.1 * 0.5), rtol=1e-6)
    else:
      np.testing.assert_array_equal(after, before, err_msg=name)


def test_adam_has_no_weight_decay():
  for before, after in _one_zero_gradient_step(
    _config(optimizer="adam", weight_decay=0.0)
  ).values():
    np.testing.assert_array_equal(after, before)


def test_the_optimizer_follows_the_settings():
  adam = optimizers.make_optimizer(RunConfig.of().resolved().optimizer, 64, [], train_steps=10)
  assert type(adam).__name__ == "Adam" and adam.beta_2 == 0.98  # the paper's, unchanged
  adamw = optimizers.make_optimizer(_config(adam_beta2=0.99).optimizer, 64, [], train_steps=10)
  assert type(adamw).__name__ == "AdamW"
  assert (adamw.beta_2, adamw.weight_decay) == (0.99, 0.5)


def test_the_cosine_schedule_ends_at_the_floor():
  config = _config(schedule="cosine", warmup_steps=10, train_steps=100, min_learning_rate=0.01)
  schedule = optimizers.make_schedule(config.optimizer, 64, config.loop.train_steps)
  assert float(schedule(9)) == pytest.approx(0.1)  # the peak
  assert float(schedule(99)) == pytest.approx(0.01)  # the floor, not 0
  assert 0.01 < float(schedule(50)) < 0.1


@pytest.mark.slow  # a fresh interpreter: the CPU is split before TensorFlow starts its devices
def test_adamw_under_two_mirrored_replicas_and_loss_scaling():
  """The exclusion holds for the variables of a two-replica MirroredStrategy, and through the
  LossScaleOptimizer of mixed_float16."""
  code = """
import numpy as np, tensorflow as tf
from train import distribute
distribute.split_cpu(2)
from test_optimizer import _config, _one_zero_gradient_step
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
changed = _one_zero_gradient_step(_config(mixed_precision="mixed_float16"), strategy)
for name, (before, after) in changed.items():
  factor = (1 - 0.1 * 0.5) if "kernel" in name else 1.0
  np.testing.assert_allclose(after, before * factor, rtol=1e-6, err_msg=name)
print("ok", len(changed))
"""
  path = os.pathsep.join([REPO, os.path.join(REPO, "tests"), os.path.dirname(__file__)])
  result = subprocess.run(
    [sys.executable, "-c", code],
    cwd=REPO,
    env=environment(PYTHONPATH=path),
    capture_output=True,
    text=True,
  )
  assert result.returncode == 0, result.stderr[-3000:]
  assert result.stdout.split()[-2:] == ["ok", "4"]
