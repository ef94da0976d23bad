"""The optimizer of a run and its learning-rate schedule, from the run's settings.

Adam (Kingma & Ba) with beta_1 0.9 and epsilon 1e-9 as in the paper (section 5.3), beta_2 from
`--adam_beta2` (the paper's 0.98 by default); `--optimizer=adamw` adds Keras' decoupled weight
decay (Loshchilov & Hutter) on the weight matrices and embedding tables only: a variable of rank
2 or more decays, a bias or a layer norm's scale and offset does not (nanoGPT's rule).
"""

import keras
import tensorflow as tf

from tfattn.schedules import NoamSchedule, WarmupSchedule
from train.sections.optimizer import Optimizer


def make_schedule(
  config: Optimizer, d_model: int, train_steps: int
) -> keras.optimizers.schedules.LearningRateSchedule:
  """The paper's schedule (peak tied to d_model) or a warm-up to --learning_rate, then the
  chosen decay to the last of `train_steps` (a cosine ends at --min_learning_rate)."""
  if config.schedule == "noam":
    return NoamSchedule(d_model, config.warmup_steps, config.learning_rate)
  return WarmupSchedule(
    config.learning_rate,
    config.warmup_steps,
    train_steps,
    config.schedule,
    floor=config.min_learning_rate or 0.0,
  )


def decays(variable: tf.Variable) -> bool:
  """Whether weight decay applies to `variable`: matrices and tables (rank >= 2) decay; biases
  and layer-norm scales and offsets (rank 1) do not."""
  return variable.shape.rank >= 2


def make_optimizer(
  config: Optimizer, d_model: int, variables, *, train_steps: int, loss_scaled: bool = False
) -> keras.optimizers.Optimizer:
  """The run's optimizer over `variables` (built, so its slots exist before `strategy.run`);
  with `loss_scaled` (mixed_float16) wrapped in a `LossScaleOptimizer`. Call inside the
  strategy's scope."""
  schedule = make_schedule(config, d_model, train_steps)
  common = dict(beta_1=0.9, beta_2=config.adam_beta2, epsilon=1e-9)
  if config.name == "adamw":
    optimizer = keras.optimizers.AdamW(schedule, weight_decay=config.weight_decay, **common)
    optimizer.exclude_from_weight_decay(var_list=[v for v in variables if not decays(v)])
  else:
    optimizer = keras.optimizers.Adam(schedule, **common)
  if loss_scaled:
    optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
  # Slots are created up front: lazily creating them inside strategy.run fails.
  optimizer.build(variables)
  return optimizer
