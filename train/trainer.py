"""The training run: tokenizers, model, optimizer, distributed custom loop, checkpoints, metrics.

What it writes, where: `tfattn/run_dir.py` (RunDir).
"""

import dataclasses
import json
import os
import shutil
import signal
import time
from typing import Tuple

import keras
import tensorflow as tf
from absl import logging

import tfattn
from tfattn import checkpoints, text
from tfattn.run_dir import RunDir
from tfattn.schedules import WARMUP_DECAYS, NoamSchedule, WarmupSchedule
from train import distribute, kinds, performance, recipes, resume, tokenizer
from train.files import write_json_atomically, write_text_atomically
from train.run_config import RunConfig
from train.tasks import Task, get_task

_SCHEDULES = ("noam",) + WARMUP_DECAYS
_TRUNCATE_SIDES = ("right", "left")

_COMPUTE_DTYPES = {"float32": "float32", "mixed_float16": "float16",
                   "mixed_bfloat16": "bfloat16"}


def model_config_for(config: RunConfig, source_vocab, target_vocab, num_classes):
  if config.mixed_precision not in _COMPUTE_DTYPES:
    raise ValueError(f"--mixed_precision must be one of {list(_COMPUTE_DTYPES)}")
  overrides = dict(source_vocab_size=source_vocab, target_vocab_size=target_vocab,
                   max_length=config.max_length, norm_position=config.norm_position,
                   compute_dtype=_COMPUTE_DTYPES[config.mixed_precision],
                   num_classes=num_classes, seed=config.seed, dropout_rate=config.dropout,
                   feed_forward_dropout_rate=config.feed_forward_dropout)
  if config.classifier_body is not None:
    overrides["classifier_body"] = config.classifier_body
  for field, value in (("d_model", config.d_model), ("num_heads", config.num_heads),
                       ("dff", config.dff), ("num_encoder_layers", config.num_layers),
                       ("num_decoder_layers", config.num_layers)):
    if value is not None:
      overrides[field] = value
  return tfattn.TransformerConfig.preset(config.model, **overrides)


_MODEL_SIZE_FIELDS = ("d_model", "num_heads", "dff", "num_layers")
_POSITIVE_FIELDS = ("batch_size", "vocab_size", "max_length", "log_every", "checkpoint_every",
                    "keep_checkpoints", "average_checkpoints", "eval_examples", "eval_beam_size",
                    "grad_accum_steps", "d_model", "num_heads", "dff", "num_layers",
                    "vocab_examples", "batch_tokens", "learning_rate")
_CHOICES = {"tokenizer": tokenizer.TOKENIZERS, "truncate": _TRUNCATE_SIDES,
            "schedule": _SCHEDULES}


def check_values(config: RunConfig) -> None:
  """Raises ValueError for the first set field with an impossible value. Unset (None) fields
  are skipped, so this runs on the flags before any data is touched, and again once the
  recipe and the task's defaults have filled the rest."""
  for name in _POSITIVE_FIELDS:
    value = getattr(config, name)
    if value is not None and value <= 0:
      raise ValueError(f"--{name} must be positive, got {value}")
  for name in ("train_steps", "warmup_steps", "eval_every", "cpu_replicas", "clip_norm"):
    value = getattr(config, name)
    if value is not None and value < 0:
      raise ValueError(f"--{name} must be >= 0, got {value}")
  for name in ("dropout", "feed_forward_dropout", "label_smoothing"):
    value = getattr(config, name)
    if value is not None and not 0 <= value < 1:
      raise ValueError(f"--{name} must be in [0, 1), got {value}")
  for name, choices in _CHOICES.items():
    value = getattr(config, name)
    if value is not None and value not in choices:
      raise ValueError(f"--{name} must be one of {list(choices)}, got {value!r}")
  if (config.average_checkpoints and config.keep_checkpoints
      and config.average_checkpoints > config.keep_checkpoints):
    raise ValueError(f"--average_checkpoints ({config.average_checkpoints}) needs "
                     f"--keep_checkpoints >= it (got {config.keep_checkpoints})")
  if config.batch_tokens and config.max_length and config.batch_tokens < config.max_length:
    raise ValueError(f"--batch_tokens ({config.batch_tokens}) must hold at least one "
                     f"--max_length ({config.max_length}) example")


def resolve_config(config: RunConfig, task) -> RunConfig:
  """Explicit flags, then the recipe, then the task's defaults, then the global fallbacks;
  checks the values that would otherwise fail late (after vocabulary learning). An explicit
  --model preset is not resized by the recipe's or the task's d_model, dff, heads, layers."""
  layers = (recipes.recipe_values(config.recipe, task.kind),) if config.recipe else ()
  layers += (task.defaults,)
  if config.model is not None:
    layers = tuple({k: v for k, v in layer.items() if k not in _MODEL_SIZE_FIELDS}
                   for layer in layers)
  config = config.resolved(*layers)
  check_values(config)
  return _resolve_device_defaults(config)


def _gpus_support_bfloat16(gpus):
  for gpu in gpus:
    capability = tf.config.experimental.get_device_details(gpu).get("compute_capability")
    if not capability or tuple(capability) < (8, 0):  # bf16 tensor cores: Ampere and later
      return False
  return True


def _resolve_device_defaults(config: RunConfig) -> RunConfig:
  """`--jit_compile` unset and `--mixed_precision=auto` follow the hardware: XLA and bfloat16
  on GPUs that run them well, plain float32 graphs on CPUs."""
  gpus = tf.config.list_physical_devices("GPU")
  jit_compile = bool(gpus) if config.jit_compile is None else config.jit_compile
  precision = config.mixed_precision
  if precision == "auto":
    precision = "mixed_bfloat16" if gpus and _gpus_support_bfloat16(gpus) else "float32"
  return dataclasses.replace(config, jit_compile=jit_compile, mixed_precision=precision)


def make_schedule(config: RunConfig, d_model):
  if config.schedule == "noam":
    return NoamSchedule(d_model, config.warmup_steps, config.learning_rate)
  return WarmupSchedule(config.learning_rate, config.warmup_steps, config.train_steps,
                        config.schedule)


def _tokenizers(task, sides, config, run_dir: RunDir):
  """{side: tokenizer}, the vocabulary of side i learned from the i-th element of the task's
  examples; learned once: a resumed run reuses the saved files."""
  loaded = {}
  for index, side in enumerate(sides):
    try:
      loaded[side] = run_dir.load_tokenizer(side)
    except ValueError:  # a new run: learn it
      path = tokenizer.learn_and_write(
          config.tokenizer, task.train().map(lambda *pair, i=index: pair[i]), config.vocab_size,
          os.path.join(run_dir.vocab, side), config.lower_case, config.vocab_examples)
      loaded[side] = text.load_tokenizer(path)
  return loaded


class _StopRequest:
  """Turns SIGTERM and Ctrl-C (SIGINT) into a flag the loop checks, so the run saves a
  checkpoint before exiting; a second Ctrl-C exits at once, without saving."""

  _SIGNALS = (signal.SIGTERM, signal.SIGINT)

  def __init__(self):
    self.requested = False
    self._previous = {signum: signal.signal(signum, self._handle) for signum in self._SIGNALS}

  def _handle(self, signum, frame):
    name = signal.Signals(signum).name
    if self.requested and signum == signal.SIGINT:
      logging.warning("second %s: exiting without a checkpoint", name)
      os._exit(130)  # the conventional status of a Ctrl-C'd program
    logging.warning("%s received: saving a checkpoint and stopping (Ctrl-C again: exit now)",
                    name)
    self.requested = True

  def restore(self):
    for signum, previous in self._previous.items():
      signal.signal(signum, previous)


def prepare(config: RunConfig) -> Tuple[RunConfig, Task, tf.distribute.Strategy]:
  """The process-wide set-up of a run, before a Trainer exists: checks the flags as given (before
  any data is generated or read), builds the task, fills the configuration from the recipe and
  the task (logged), sets op determinism and the global seed, builds the strategy.

  Returns (resolved config, task, strategy), the arguments of `Trainer`."""
  check_values(config)
  task = get_task(config.task, config.seed, config.data_dir, config.train_file,
                  config.eval_file, config.tsv_kind)
  config = resolve_config(config, task)
  logging.info("effective configuration: %s", "  ".join(
      f"{k}={v}" for k, v in sorted(dataclasses.asdict(config).items()) if v is not None))
  if config.clip_norm and config.mixed_precision == "mixed_float16":
    raise ValueError("--clip_norm with --mixed_precision=mixed_float16 is not supported "
                     "(clipping would see loss-scaled gradients); use mixed_bfloat16")
  if config.deterministic:
    tf.config.experimental.enable_op_determinism()
  keras.utils.set_random_seed(config.seed)
  return config, task, distribute.make_strategy(config.strategy, config.cpu_replicas)


class Trainer:
  """One training run; `run()` trains to `train_steps`, resuming from the latest checkpoint.

  Args:
    config: the resolved RunConfig (see `prepare`).
    task: where the examples come from; its kind (`train/kinds.py`) supplies the model,
      batches, loss and evaluation.
    strategy: the tf.distribute strategy to train under.
  """

  def __init__(self, config: RunConfig, task: Task, strategy: tf.distribute.Strategy):
    self.config, self.task, self.strategy = config, task, strategy
    self.kind = kinds.of(task)
    self.is_chief = distribute.is_chief(self.strategy)
    if config.batch_size % self.strategy.num_replicas_in_sync:
      raise ValueError(f"--batch_size ({config.batch_size}) must be divisible by the number of "
                       f"replicas ({self.strategy.num_replicas_in_sync})")
    # Everything that can be checked is checked before the first file is written: the model
    # settings (with the requested vocabulary size) and the saved run's configuration.
    model_config_for(config, config.vocab_size, config.vocab_size, self.task.num_classes)
    resume.check_resumable(config.run_dir, config)
    self.run_dir = RunDir(config.run_dir)
    os.makedirs(self.run_dir.path, exist_ok=True)
    self.tokenizers = _tokenizers(self.task, self.kind.vocabulary_sides, config, self.run_dir)
    source_vocab = self.tokenizers["source"].vocab_size
    target_vocab = self.tokenizers.get("target", self.tokenizers["source"]).vocab_size
    self.model_config = model_config_for(config, source_vocab,
                                         target_vocab, self.task.num_classes)
    if self.is_chief:
      config.save(self.run_dir.run_config)
      write_text_atomically(self.run_dir.model_config, self.model_config.to_json())
      write_json_atomically(self.run_dir.task,
                  {"name": self.task.name, "kind": self.task.kind,
                   "num_classes": self.task.num_classes, "truncate": config.truncate})

    with self.strategy.scope():
      self.model = self.kind.build_model(self.model_config)
      schedule = make_schedule(config, self.model_config.d_model)
      self.optimizer = keras.optimizers.Adam(schedule, beta_1=0.9, beta_2=0.98, epsilon=1e-9)
      if config.mixed_precision == "mixed_float16":
        self.optimizer = keras.optimizers.LossScaleOptimizer(self.optimizer)
      # Slots are created up front: lazily creating them inside strategy.run fails.
      self.optimizer.build(self.model.trainable_variables)

    # Data: each worker reads its own shard in batches of batch_size / num_workers, and each
    # local replica slices its rows out of that batch inside the step. A plain tf.data
    # iterator (unlike tf.distribute's) is checkpointable, which gives exact resume.
    self.local_replicas = len(self.strategy.extended.worker_devices)
    num_workers = self.strategy.num_replicas_in_sync // self.local_replicas
    worker_index = (self.strategy.cluster_resolver.task_id if num_workers > 1 else 0)
    train_raw = self.task.train()
    if num_workers > 1:
      train_raw = train_raw.shard(num_workers, worker_index)
    self.train_dataset = self._dataset(
        train_raw, training=True, batch_size=config.batch_size // num_workers,
        batch_tokens=(config.batch_tokens // num_workers if config.batch_tokens else None))
    self.eval_dataset = self._dataset(self.task.eval(), training=False)
    self.iterator = iter(self.train_dataset)
    self.checkpoint = tf.train.Checkpoint(model=self.model, optimizer=self.optimizer,
                                          data=self.iterator)
    checkpoint_dir = self.run_dir.checkpoints
    if not self.is_chief:  # other workers must write too (collectives), but somewhere private
      checkpoint_dir = self.run_dir.worker_checkpoints(self.strategy.cluster_resolver.task_id)
    self.manager = tf.train.CheckpointManager(self.checkpoint, checkpoint_dir,
                                              max_to_keep=config.keep_checkpoints)
    self._train_step = self._make_train_step()
    device = self.strategy.extended.worker_devices[0]
    peak = performance.measure_matmul_peak(device, self.model_config.compute_dtype)
    # Split CPU "replicas" share one CPU; GPUs add up.
    devices = self.local_replicas if "GPU" in device.upper() else 1
    logging.info("%s matmul peak on %s: %.1f TFLOP/s (x%d devices: the MFU denominator)",
                 self.model_config.compute_dtype, device, peak / 1e12, devices)
    self.meter = performance.Meter(peak * devices)
    self._batch_shapes = set()

  @property
  def step(self):
    return int(self.optimizer.iterations.numpy())

  def _dataset(self, raw, training, batch_size=None, batch_tokens=None):
    c = self.config
    kwargs = dict(batch_size=batch_size or c.batch_size, max_length=c.max_length,
                  shuffle_seed=c.seed if training else None, repeat=training,
                  drop_remainder=training)  # equal per-replica shards
    if training:
      # Bucket-length padding under XLA: a handful of batch shapes, one program each.
      kwargs.update(batch_tokens=batch_tokens, multiple_of=self.local_replicas,
                    pad_to_bucket=c.jit_compile)
    return self.kind.dataset(raw, self.tokenizers, training, c.truncate, **kwargs)

  def _make_train_step(self):
    """One optimizer step over `grad_accum_steps` micro-batches.

    Each replica differentiates the mean loss of its slice of each micro-batch (compiled with
    XLA when jit_compile is on), weights those gradients by the slice's token count and
    divides the sum by the *global* token count of the whole step: summing replica gradients
    then gives exactly the gradient of the mean token loss over every micro-batch of every
    replica, whatever the batch shapes. All-reduce and the optimizer update stay outside XLA
    (tf.distribute's collectives cannot be compiled into the program)."""
    clip_norm = self.config.clip_norm
    variables = self.model.trainable_variables
    optimizer = self.optimizer
    scaled = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
    local_replicas = self.local_replicas
    micro_batches = self.config.grad_accum_steps
    smoothing = self.config.label_smoothing

    def gradients(batch):
      with tf.GradientTape() as tape:
        loss_sum, correct, count, tokens = self.kind.loss_sums(self.model, batch, smoothing)
        mean = loss_sum / tf.maximum(count, 1.0)
        to_differentiate = optimizer.scale_loss(mean) if scaled else mean
      return tape.gradient(to_differentiate, variables), loss_sum, correct, count, tokens

    if self.config.jit_compile:
      gradients = tf.function(gradients, jit_compile=True)

    def replica_step(worker_batches):
      replica = tf.distribute.get_replica_context()
      local_id = replica.replica_id_in_sync_group % local_replicas
      summed, sums = None, [tf.constant(0.0)] * 4
      for worker_batch in worker_batches:
        rows = tf.shape(next(iter(worker_batch.values())))[0] // local_replicas
        batch = {name: value[local_id * rows:(local_id + 1) * rows]
                 for name, value in worker_batch.items()}
        grads, *batch_sums = gradients(batch)
        count = batch_sums[2]  # gradient of the mean x token count = gradient of the sum
        weighted = [g * count for g in grads]
        summed = weighted if summed is None else [a + b for a, b in zip(summed, weighted)]
        sums = [a + b for a, b in zip(sums, batch_sums)]
      loss_sum, correct, count, tokens = sums
      global_count = tf.maximum(replica.all_reduce(tf.distribute.ReduceOp.SUM, count), 1.0)
      grads = [g / global_count for g in summed]
      if clip_norm:
        # Keras clips each replica's *local* gradients; the global norm needs the sum first.
        # The optimizer sums across replicas again, hence the division.
        grads = replica.all_reduce(tf.distribute.ReduceOp.SUM, grads)
        grads, _ = tf.clip_by_global_norm(grads, clip_norm)
        grads = [g / replica.num_replicas_in_sync for g in grads]
      optimizer.apply_gradients(zip(grads, variables))
      return loss_sum / global_count, correct, count, tokens

    @tf.function
    def train_step(iterator):
      batches = [iterator.get_next() for _ in range(micro_batches)]
      per_replica = self.strategy.run(replica_step, args=(batches,))
      totals = [self.strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None)
                for value in per_replica]
      # Padded (rows, source length, target length) of each micro-batch: FLOPs and the XLA
      # program count are derived from them.
      shapes = [tf.stack([tf.shape(b["source"])[0], tf.shape(b["source"])[1],
                          tf.shape(b["target_in"])[1] if "target_in" in b else 0])
                for b in batches]
      return totals, tf.stack(shapes)

    return train_step

  def evaluate(self):
    metrics = self.kind.evaluate(self.model, self.eval_dataset, self.tokenizers, self.config)
    metrics["step"] = self.step
    return metrics

  def _save(self):
    path = self.manager.save(checkpoint_number=self.step)
    if not self.is_chief:
      shutil.rmtree(os.path.dirname(path), ignore_errors=True)
    return path

  def run(self):
    c = self.config
    restored = self.manager.restore_or_initialize()
    if restored:
      logging.info("resumed from %s at step %d", restored, self.step)
    writer = (tf.summary.create_file_writer(self.run_dir.logs)
              if self.is_chief else tf.summary.create_noop_writer())
    log_path = self.run_dir.train_log
    stop = _StopRequest()
    if self.step < c.train_steps:
      logging.info("training from step %d to %d (the first step builds the graph)", self.step,
                   c.train_steps)
    try:
      interval_start, interval_step = time.time(), self.step
      self.meter.reset()
      while self.step < c.train_steps and not stop.requested:
        (loss, correct, count, tokens), shapes = self._train_step(self.iterator)
        step = self.step
        shapes = [tuple(int(x) for x in row) for row in shapes.numpy()]
        self._note_batch_shapes(shapes)
        self.meter.add(float(tokens), kinds.step_training_flops(self.kind, self.model_config,
                                                                shapes))
        if step % c.log_every == 0 or step == c.train_steps:
          elapsed = time.time() - interval_start
          steps_per_second = (step - interval_step) / max(elapsed, 1e-9)
          tokens_per_second, mfu = self.meter.read()
          eta = (c.train_steps - step) / max(steps_per_second, 1e-9)
          record = {"step": step, "loss": float(loss),
                    "accuracy": float(correct) / max(float(count), 1.0),
                    "learning_rate": float(self.optimizer.learning_rate),
                    "steps_per_second": steps_per_second,
                    "tokens_per_second": tokens_per_second, "mfu": mfu}
          logging.info("step %d/%d  loss %.4f  acc %.3f  lr %.2e  %.1f steps/s  %.0f tok/s  "
                       "MFU %.3f  ETA %dm%02ds", step, c.train_steps, record["loss"],
                       record["accuracy"], record["learning_rate"], steps_per_second,
                       tokens_per_second, mfu, eta // 60, eta % 60)
          if self.is_chief:
            with writer.as_default(step=step):
              for name in ("loss", "accuracy", "learning_rate", "steps_per_second",
                           "tokens_per_second", "mfu"):
                tf.summary.scalar(f"train/{name}", record[name])
            with open(log_path, "a") as f:
              f.write(json.dumps(record) + "\n")
          interval_start, interval_step = time.time(), step
          self.meter.reset()
        if step % c.checkpoint_every == 0:
          self._save()
        if c.eval_every and step % c.eval_every == 0 and step < c.train_steps:
          self._log_eval(writer)
      self._save()
      if stop.requested:
        logging.warning("stopped at step %d; run again with the same --run_dir to resume",
                        self.step)
        return None
      return self._log_eval(writer, self._average_for_final_evaluation())
    finally:
      stop.restore()
      writer.flush()

  def _note_batch_shapes(self, shapes):
    """Under XLA each new padded batch shape compiles one more program: say so."""
    new = sorted(set(shapes) - self._batch_shapes)
    self._batch_shapes.update(new)
    if self.config.jit_compile and new:
      logging.info("XLA: compiled the train step for %s (%d program%s so far)",
                   ", ".join("rows %d x source %d%s" % (r, s_len, f" x target {t_len}" if t_len
                                                       else "") for r, s_len, t_len in new),
                   len(self._batch_shapes), "" if len(self._batch_shapes) == 1 else "s")

  def _average_for_final_evaluation(self):
    """Loads the mean of the last `average_checkpoints` kept checkpoints into the model, so the
    final evaluation judges the weights the export will serve; returns their prefixes."""
    wanted = self.config.average_checkpoints
    if wanted <= 1 or not self.is_chief:
      return []
    kept = len(self.manager.checkpoints)
    if kept < wanted:  # a run shorter than the averaging window
      logging.warning("--average_checkpoints=%d but only %d checkpoints are kept: averaging %d",
                      wanted, kept, kept)
    chosen = checkpoints.checkpoints_to_average(self.manager.directory,
                                                average_last=min(wanted, kept))
    if len(chosen) > 1:
      logging.info("averaging the weights of %s", ", ".join(os.path.basename(p) for p in chosen))
      checkpoints.restore_average(self.model, chosen)
    return chosen

  def _log_eval(self, writer, averaged=()):
    logging.info("evaluating on up to %d held-out examples%s", self.config.eval_examples,
                 self.kind.evaluation_note(self.config))
    metrics = self.evaluate()
    if len(averaged) > 1:
      metrics["averaged_checkpoints"] = [os.path.basename(p) for p in averaged]
    logging.info("eval at step %d: %s", metrics["step"],
                 "  ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}"
                           for k, v in sorted(metrics.items())))
    if self.is_chief:
      with writer.as_default(step=metrics["step"]):
        for name, value in metrics.items():
          if isinstance(value, float):
            tf.summary.scalar(f"eval/{name}", value)
      write_json_atomically(self.run_dir.eval_metrics, metrics)
    return metrics
