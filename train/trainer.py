"""The training run: model, optimizer (`train/optimizer.py`), distributed custom loop,
checkpoints, evaluation.

What it writes, where: `tfattn/support/run_dir.py` (RunDir). The vocabularies are learned by
`train/vocabularies.py`, the run files written by `train/run_files.py`, the MFU peak measured by
`train/performance.py`; the task kind (`train/kinds.py`) supplies model, batches, loss and
evaluation.
"""

import collections
import dataclasses
import os
import shutil
import signal
import time
from typing import Dict, List, Optional, Tuple

import keras
import tensorflow as tf
from absl import logging

from tfattn.support import attention_plot, checkpoints
from tfattn.support.run_dir import RunDir
from train import (
  distribute,
  evaluation,
  init_from,
  kinds,
  performance,
  resume,
  run_files,
  vocabularies,
)
from train.batching import Batching
from train.best_checkpoint import BestCheckpoint
from train.early_stopping import EarlyStopping
from train.optimizer import make_optimizer
from train.run_config import RunConfig
from train.sections.loop import Loop
from train.task import Task
from train.tasks import get_task


def _zero_sums() -> kinds.LossSums:
  return kinds.LossSums(*[tf.constant(0.0)] * 4)


class _Interval:
  """What the steps since the last progress line add up to, on the host: the loss, correct and
  counted positions (summed over every step, read once per loop) and the wall time."""

  def __init__(self, step: int):
    self.start_step, self.start_time = step, time.time()
    self.loss = self.correct = self.count = 0.0

  def add(self, sums):
    """`sums`: one loop's (loss, correct, count, tokens) as floats."""
    self.loss += sums[0]
    self.correct += sums[1]
    self.count += sums[2]

  def steps_per_second(self, step: int) -> float:
    return (step - self.start_step) / max(time.time() - self.start_time, 1e-9)


def loop_end(step: int, config: Loop) -> int:
  """Where the loop that starts after `step` ends: `steps_per_loop` steps on, or earlier at the
  next log, checkpoint or evaluation step or the last step, so that each of those sees the
  weights of its own step."""
  ends = [config.train_steps, step + config.steps_per_loop]
  for every in (config.log_every, config.checkpoint_every, config.eval_every):
    if every:
      ends.append((step // every + 1) * every)
  return min(ends)


class _StopRequest:
  """Turns SIGTERM and Ctrl-C (SIGINT) into a flag the loop checks between loops, so the run
  saves a checkpoint before exiting; a second Ctrl-C exits at once, without saving."""

  _SIGNALS = (signal.SIGTERM, signal.SIGINT)

  def __init__(self, steps_per_loop: int = 1):
    self.requested = False
    self._when = (
      "when the current loop of up to %d steps ends" % steps_per_loop
      if steps_per_loop > 1
      else "after this step"
    )
    self._previous = {signum: signal.signal(signum, self._handle) for signum in self._SIGNALS}

  def _handle(self, signum, frame):
    name = signal.Signals(signum).name
    if self.requested and signum == signal.SIGINT:
      logging.warning("second %s: exiting without a checkpoint", name)
      os._exit(130)  # the conventional status of a Ctrl-C'd program
    logging.warning(
      "%s received: saving a checkpoint %s and stopping (Ctrl-C again: exit now)", name, self._when
    )
    self.requested = True

  def restore(self):
    for signum, previous in self._previous.items():
      signal.signal(signum, previous)


def prepare(config: RunConfig) -> Tuple[RunConfig, Task, tf.distribute.Strategy]:
  """The process-wide set-up of a run, before a Trainer exists: checks the flags as given (before
  any data is generated or read), builds the task, fills the configuration from the recipe and
  the task (logged), sets op determinism and the global seed, builds the strategy.

  Returns (resolved config, task, strategy), the arguments of `Trainer`."""
  config.check()
  distribute.check_gpu_replicas(config.device.gpu_replicas)
  task = get_task(config.data, config.seed)
  config = config.resolved_for(task)
  device = config.device
  jit_compile, precision = distribute.resolve_device_defaults(
    device.jit_compile, device.mixed_precision
  )
  config = dataclasses.replace(
    config,
    device=dataclasses.replace(device, jit_compile=jit_compile, mixed_precision=precision),
    loop=dataclasses.replace(
      config.loop, steps_per_loop=distribute.default_steps_per_loop(config.loop.steps_per_loop)
    ),
  )
  logging.info("effective configuration:\n%s", config.describe())
  if task.validation_note:
    logging.warning("%s", task.validation_note)
  if task.test is None:
    logging.info("this task has no test data: the run reports validation numbers only")
  device = config.device
  if device.deterministic:
    tf.config.experimental.enable_op_determinism()
  keras.utils.set_random_seed(config.seed)
  return (
    config,
    task,
    distribute.make_strategy(device.strategy, device.cpu_replicas, device.gpu_replicas),
  )


def make_train_loop(
  model,
  kind,
  optimizer,
  strategy: tf.distribute.Strategy,
  *,
  jit_compile: bool,
  grad_accum_steps: int = 1,
  label_smoothing: float = 0.0,
  clip_norm: Optional[float] = None,
  local_replicas: int = 1,
  variables=None,
):
  """`train_loop(iterator, steps)`: `steps` optimizer steps of `model` (its loss from `kind`,
  `train.kinds`) under `strategy` in one call (Orbit's steps_per_loop, Keras'
  steps_per_execution), so the host does not wait for the device after every step. The
  Trainer's own loop; `benchmarks/keras_hub_speed.py` times it too. Returns the loss sums of
  all those steps, added on the device, and the padded (rows, source length, target length)
  of every micro-batch, int32 `[steps * micro, 3]`.

  Each optimizer step runs over `grad_accum_steps` micro-batches. Each replica differentiates
  the mean loss of its slice of each micro-batch (compiled with XLA when jit_compile is on),
  weights those gradients by the slice's token count and divides the sum by the *global*
  token count of the whole step: summing replica gradients then gives exactly the gradient of
  the mean token loss over every micro-batch of every replica, whatever the batch shapes.
  With several replicas, all-reduce and the optimizer update stay outside XLA (tf.distribute's
  collectives cannot be compiled into the program). With one replica and jit_compile there is
  nothing to all-reduce: the whole step (every micro-batch's forward and backward pass,
  clipping and the optimizer's update) is one XLA program (1.07x-1.10x the tokens/s of the
  update outside XLA at nanoGPT's CPU size: WORKSPACE_NOTES.md, issue 41)."""
  # The variables that train: all trainable ones unless some are frozen (--freeze).
  variables = model.trainable_variables if variables is None else variables
  scaled = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
  micro_batches, smoothing = grad_accum_steps, label_smoothing

  def gradients(batch):
    with tf.GradientTape() as tape:
      sums = kind.loss_sums(model, batch, smoothing)
      mean = sums.loss / tf.maximum(sums.count, 1.0)
      to_differentiate = optimizer.scale_loss(mean) if scaled else mean
    return tape.gradient(to_differentiate, variables), sums

  def summed_gradients(batches):
    """The token-weighted sum of the micro-batches' gradients, and their loss sums."""
    summed, totals = None, _zero_sums()
    for batch in batches:
      grads, sums = gradients(batch)
      # The gradient of the mean times the token count is the gradient of the sum.
      weighted = [g * sums.count for g in grads]
      summed = weighted if summed is None else [a + b for a, b in zip(summed, weighted)]
      totals = kinds.LossSums(*[a + b for a, b in zip(totals, sums)])
    return summed, totals

  def whole_step(batches):
    """One replica's whole optimizer step, compiled as one XLA program."""
    summed, totals = summed_gradients(batches)
    grads = [g / tf.maximum(totals.count, 1.0) for g in summed]
    if clip_norm:
      grads, _ = tf.clip_by_global_norm(grads, clip_norm)
    optimizer.apply_gradients(zip(grads, variables))
    return totals

  def multi_replica_step(worker_batches):
    replica = tf.distribute.get_replica_context()
    local_id = replica.replica_id_in_sync_group % local_replicas
    batches = []
    for worker_batch in worker_batches:
      rows = tf.shape(next(iter(worker_batch.values())))[0] // local_replicas
      batches.append(
        {
          name: value[local_id * rows : (local_id + 1) * rows]
          for name, value in worker_batch.items()
        }
      )
    summed, totals = summed_gradients(batches)
    global_count = tf.maximum(replica.all_reduce(tf.distribute.ReduceOp.SUM, totals.count), 1.0)
    grads = [g / global_count for g in summed]
    if clip_norm:
      # Keras clips each replica's *local* gradients; the global norm needs the sum first.
      # The optimizer sums across replicas again, hence the division.
      grads = replica.all_reduce(tf.distribute.ReduceOp.SUM, grads)
      grads, _ = tf.clip_by_global_norm(grads, clip_norm)
      grads = [g / replica.num_replicas_in_sync for g in grads]
    optimizer.apply_gradients(zip(grads, variables))
    return totals

  if jit_compile and strategy.num_replicas_in_sync == 1:
    replica_step = tf.function(whole_step, jit_compile=True, autograph=False)
  else:
    if jit_compile:  # summed_gradients calls this compiled one
      gradients = tf.function(gradients, jit_compile=True, autograph=False)
    replica_step = multi_replica_step

  # TensorFlow's own loop, not AutoGraph's rewrite of a Python one: nothing in the training
  # graph needs AutoGraph, whose conversion of every function it calls costs seconds a trace.
  @tf.function(autograph=False)
  def train_loop(iterator, steps):
    def one_step(step, totals, shapes):
      batches = [iterator.get_next() for _ in range(micro_batches)]
      per_replica = strategy.run(replica_step, args=(batches,))
      totals = kinds.LossSums(
        *[
          total + strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None)
          for total, value in zip(totals, per_replica)
        ]
      )
      # FLOPs and the XLA program count are derived from these, read once per loop.
      for index, batch in enumerate(batches):
        shapes = shapes.write(step * micro_batches + index, kind.batch_shape(batch))
      return step + 1, totals, shapes

    shapes = tf.TensorArray(tf.int32, size=steps * micro_batches, element_shape=[3])
    _, totals, shapes = tf.while_loop(
      lambda step, *_: step < steps, one_step, (tf.constant(0), _zero_sums(), shapes)
    )
    return totals, shapes.stack()

  return train_loop


class Trainer:
  """One training run; `run()` trains to `train_steps`, resuming from the latest checkpoint.

  The run reads its own sections (`self.loop`, `self.device`) and hands every other consumer
  its own: the optimizer section to `make_optimizer`, the vocabulary section to
  `vocabularies`, the decoding options to the kind's evaluation.

  Args:
    config: the resolved RunConfig (see `prepare`).
    task: where the examples come from; its kind (`train/kinds.py`) supplies the model,
      batches, loss and evaluation.
    strategy: the tf.distribute strategy to train under.
  """

  def __init__(self, config: RunConfig, task: Task, strategy: tf.distribute.Strategy):
    self.config, self.task, self.strategy = config, task, strategy
    self.loop, self.device = config.loop, config.device
    self.decoding = config.decode_options() if config.decode is not None else None
    self.kind = kinds.of(task)
    self.is_chief = distribute.is_chief(strategy)
    self.local_replicas = len(strategy.extended.worker_devices)
    self.run_dir = RunDir(config.run_dir)
    self._check_before_writing()
    os.makedirs(self.run_dir.path, exist_ok=True)
    init = config.model.init_from
    self.init_source = init_from.check_source(init, task.kind) if init else None
    if self.init_source is not None:  # its tokenizers, before anything learns new ones
      init_from.copy_vocabularies(self.init_source, self.run_dir)
    self.tokenizers = vocabularies.learn_or_load(
      task, self.kind.vocabulary_sides, config.vocabulary, config.seed, self.run_dir
    )
    if self.init_source is not None:
      self.model_config = init_from.model_config(
        self.init_source, config.model.dropout, config.device.compute_dtype
      )
    else:
      self.model_config = config.model_config(
        num_classes=task.num_classes, **self._vocab_sizes(self.tokenizers)
      )
    if self.is_chief:
      run_files.write_start(self.run_dir, config, self.model_config, task)
    self._build_model_and_optimizer()
    self._build_datasets()
    self._build_checkpoints()
    if self.init_source is not None and self.manager.latest_checkpoint is None:
      # A new run starts from the other run's weights; a resumed one reads its own (`run`).
      chosen = init_from.load_weights(self.model, self.init_source)
      logging.info("starting from the weights of %s", ", ".join(chosen))
    self._train_loop = self._make_train_loop()
    self.meter = performance.meter_for(strategy, self.model_config.compute_dtype)
    self._batch_shapes = set()

  def _vocab_sizes(self, tokenizers) -> Dict[str, int]:
    return self.kind.vocab_sizes({side: t.vocab_size for side, t in tokenizers.items()})

  def _check_before_writing(self):
    """What can be checked is checked before the first file is written: the replica split, the
    model settings (with the requested vocabulary size) and the saved run's configuration."""
    c = self.config
    if c.data.batch_size % self.strategy.num_replicas_in_sync:
      raise ValueError(
        f"--batch_size ({c.data.batch_size}) must be divisible by the number of "
        f"replicas ({self.strategy.num_replicas_in_sync})"
      )
    sides = dict.fromkeys(self.kind.vocabulary_sides, c.vocabulary.vocab_size)
    c.model_config(num_classes=self.task.num_classes, **self.kind.vocab_sizes(sides))
    resume.check_resumable(c.run_dir, c, self.task.kind)

  def _build_model_and_optimizer(self):
    with self.strategy.scope():
      self.model = self.kind.build_model(self.model_config)
      self.trained_variables = init_from.trained_variables(self.model, self.config.optimizer.freeze)
      self.optimizer = make_optimizer(
        self.config.optimizer,
        self.model_config.d_model,
        self.trained_variables,
        train_steps=self.loop.train_steps,
        loss_scaled=self.device.loss_scaled,
      )

  def _build_datasets(self):
    """Each worker reads its own shard of the training examples in batches of batch_size /
    num_workers, and each local replica slices its rows out of that batch inside the step. A
    plain tf.data iterator (unlike tf.distribute's) is checkpointable: exact resume."""
    data = self.config.data
    num_workers = self.strategy.num_replicas_in_sync // self.local_replicas
    worker = self.strategy.cluster_resolver.task_id if num_workers > 1 else 0
    train_raw = self.task.train_for_worker(num_workers, worker)  # streamed files: by file
    evaluation = Batching(
      batch_size=data.batch_size,
      max_length=self.config.model.max_length,
      start_id=self.model_config.start_id,
      truncate=data.truncate or "right",
    )
    # Equal per-replica shards; bucket-length padding under XLA: a handful of batch shapes.
    training = evaluation.replace(
      batch_size=data.batch_size // num_workers,
      batch_tokens=(data.batch_tokens // num_workers if data.batch_tokens else None),
      shuffle_seed=self.config.seed,
      training=True,
      multiple_of=self.local_replicas,
      pad_to_bucket=self.device.jit_compile,
    )
    self.train_dataset = self._dataset(train_raw, training)
    self.iterator = iter(self.train_dataset)
    self.validation_dataset = self._dataset(self.task.validation(), evaluation)
    self.test_dataset = (
      self._dataset(self.task.test(), evaluation) if self.task.test is not None else None
    )

  def _build_checkpoints(self):
    # Tokens trained on since step 0 (a float64 counts exactly to 2^53), kept in the
    # checkpoint so a resumed run goes on counting; a run saved before it starts from 0.
    self.tokens_seen = tf.Variable(0.0, dtype=tf.float64, trainable=False, name="tokens_seen")
    self.checkpoint = tf.train.Checkpoint(
      model=self.model, optimizer=self.optimizer, data=self.iterator, tokens_seen=self.tokens_seen
    )
    directory = self.run_dir.checkpoints
    if not self.is_chief:  # other workers must write too (collectives), but somewhere private
      directory = self.run_dir.worker_checkpoints(self.strategy.cluster_resolver.task_id)
    self.manager = tf.train.CheckpointManager(
      self.checkpoint, directory, max_to_keep=self.loop.keep_checkpoints
    )
    best_by = self.loop.keep_best_by
    self.best = (
      BestCheckpoint(self.model, self.run_dir.best_checkpoints, best_by, self.kind.best_by[best_by])
      if best_by and self.is_chief
      else None
    )

  def _restart_data(self):
    """A fresh training iterator, in the checkpoint too (see `resume.restore_latest`)."""
    self.iterator = self.checkpoint.data = iter(self.train_dataset)

  @property
  def step(self):
    return int(self.optimizer.iterations.numpy())

  def _dataset(self, raw, batching: Batching):
    # The task's packing (`train.tasks.get_task`), in training and evaluation alike.
    return self.kind.dataset(raw, self.tokenizers, batching, self.task.packing)

  def _make_train_loop(self):
    optimizer = self.config.optimizer
    return make_train_loop(
      self.model,
      self.kind,
      self.optimizer,
      self.strategy,
      jit_compile=self.device.jit_compile,
      grad_accum_steps=self.loop.grad_accum_steps,
      label_smoothing=optimizer.label_smoothing,
      clip_norm=optimizer.clip_norm,
      local_replicas=self.local_replicas,
      variables=self.trained_variables,
    )

  def evaluate(self, dataset=None, max_examples: Optional[int] = -1) -> Dict:
    """Metrics of the model as it is on `dataset` (default: validation) over `max_examples`
    examples (-1: --eval_examples; None: all)."""
    if dataset is None:
      dataset = self.validation_dataset
    if max_examples == -1:
      max_examples = self.loop.eval_examples
    return self.kind.evaluate(self.model, dataset, self.tokenizers, self.decoding, max_examples)

  def _save(self):
    path = self.manager.save(checkpoint_number=self.step)
    if not self.is_chief:
      shutil.rmtree(os.path.dirname(path), ignore_errors=True)
    return path

  def run(self):
    """Trains to `train_steps` (resuming), then judges the final weights: the last ones, the
    mean of the last `average_checkpoints`, or the best on validation (`keep_best_by`), on
    validation and (once) on test. Returns eval.json's contents; None when stopped early."""
    c = self.loop
    restored = resume.restore_latest(
      self.manager,
      self._restart_data,
      model=self.model,
      optimizer=self.optimizer,
      tokens_seen=self.tokens_seen,
    )
    if restored:
      logging.info("resumed from %s at step %d", restored, self.step)
    writer = (
      tf.summary.create_file_writer(self.run_dir.logs)
      if self.is_chief
      else tf.summary.create_noop_writer()
    )
    stop = _StopRequest(c.steps_per_loop)
    early = self._early_stopping()
    if self.step < c.train_steps and not (early and early.stopped):
      logging.info(
        "training from step %d to %d (the first step builds the graph)", self.step, c.train_steps
      )
    try:
      interval = _Interval(self.step)
      self.meter.reset()
      while self.step < c.train_steps and not stop.requested and not (early and early.stopped):
        step = self.step
        sums, shapes = self._train_loop(self.iterator, tf.constant(loop_end(step, c) - step))
        # The one host read of the loop: its sums and batch shapes.
        sums, shapes = (
          [float(x) for x in sums],
          collections.Counter(tuple(int(x) for x in row) for row in shapes.numpy()),
        )
        step = self.step
        interval.add(sums)
        self.tokens_seen.assign_add(sums[3])
        self._note_batch_shapes(shapes)
        self.meter.add(
          sums[3],
          sum(
            count * kinds.step_training_flops(self.kind, self.model_config, [shape])
            for shape, count in shapes.items()
          ),
        )
        if step % c.log_every == 0 or step == c.train_steps:
          self._log_progress(writer, step, interval)
          interval = _Interval(step)
          self.meter.reset()
        if step % c.checkpoint_every == 0:
          self._save()
        if c.eval_every and step % c.eval_every == 0 and step < c.train_steps:
          metrics = self._validate(writer)
          if early is not None and early.update(metrics, step):
            logging.info(
              "early stopping at step %d: validation %s has not improved by more than %g in "
              "%d evaluations (best %.4f at step %d)",
              step,
              early.metric,
              early.min_delta,
              early.patience,
              early.state["best"],
              early.state["best_step"],
            )
      self._save()
      if stop.requested:
        logging.warning(
          "stopped at step %d; run again with the same --run_dir to resume", self.step
        )
        return None
      return self._final_evaluation(writer)
    finally:
      stop.restore()
      writer.flush()

  def _early_stopping(self) -> Optional[EarlyStopping]:
    c = self.loop
    if not c.early_stopping_patience:
      return None
    return EarlyStopping(
      self.run_dir.path,
      c.keep_best_by,
      self.kind.best_by[c.keep_best_by],
      c.early_stopping_patience,
      c.early_stopping_min_delta or 0.0,
      write=self.is_chief,
    )

  def _log_progress(self, writer, step, interval: "_Interval"):
    """One progress line (and train_log.jsonl record) for the steps since the last one: their
    token-weighted mean loss and accuracy, speed and MFU."""
    c = self.loop
    steps_per_second = interval.steps_per_second(step)
    tokens_per_second, mfu = self.meter.read()
    eta = (c.train_steps - step) / max(steps_per_second, 1e-9)
    record = {
      "step": step,
      "loss": interval.loss / max(interval.count, 1.0),
      "accuracy": interval.correct / max(interval.count, 1.0),
      "learning_rate": float(self.optimizer.learning_rate),
      "steps_per_second": steps_per_second,
      "tokens_per_second": tokens_per_second,
      "tokens_seen": int(self.tokens_seen.numpy()),
      "mfu": mfu,
    }
    logging.info(
      "step %d/%d  loss %.4f  acc %.3f  lr %.2e  %.1f steps/s  %.0f tok/s  %s tokens seen  "
      "MFU %s  ETA %dm%02ds",
      step,
      c.train_steps,
      record["loss"],
      record["accuracy"],
      record["learning_rate"],
      steps_per_second,
      tokens_per_second,
      f"{record['tokens_seen']:,}",
      performance.format_mfu(mfu),
      eta // 60,
      eta % 60,
    )
    if self.is_chief:
      with writer.as_default(step=step):
        for name, value in record.items():
          if name != "step":
            tf.summary.scalar(f"train/{name}", value)
      run_files.append_train_log(self.run_dir, record)

  def _note_batch_shapes(self, shapes):
    """Under XLA each new padded batch shape compiles one more program: say so."""
    new = sorted(set(shapes) - self._batch_shapes)
    self._batch_shapes.update(new)
    if self.device.jit_compile and new:
      logging.info(
        "XLA: compiled the train step for %s (%d program%s so far)",
        ", ".join(
          "rows %d x source %d%s" % (r, s_len, f" x target {t_len}" if t_len else "")
          for r, s_len, t_len in new
        ),
        len(self._batch_shapes),
        "" if len(self._batch_shapes) == 1 else "s",
      )

  def _validate(self, writer) -> Dict:
    """An in-run evaluation on validation: logged, written, and offered to --keep_best_by."""
    logging.info(
      "evaluating on up to %d validation examples%s",
      self.loop.eval_examples,
      self.kind.evaluation_note(self.decoding),
    )
    metrics = self.evaluate()
    self._report(writer, "validation", metrics)
    self._attention_images(writer)
    if self.is_chief:
      run_files.write_evaluation(self.run_dir, {"step": self.step, "validation": metrics})
      if self.best is not None:
        self.best.offer(metrics, self.step)
    return metrics

  def _choose_final_weights(self, writer) -> Tuple[Dict, Optional[Dict]]:
    """Loads the weights the run ends with into the model: the mean of the last
    `average_checkpoints` kept checkpoints, or the best on validation, or the last ones.
    Returns ({"checkpoints": names under checkpoints/, "chosen_by": how}, their validation
    metrics where this call has just measured them, else None)."""
    last = os.path.basename(self.manager.latest_checkpoint)
    if self.best is not None:
      last_metrics = self._validate(writer)  # the last weights compete too
      best_step = self.best.record["step"]
      last_won = best_step == self.step  # the model holds them, judged on validation just now
      prefix = self.best.prefix if last_won else self.best.restore()
      logging.info("final weights: the best %s on validation, step %d", self.best.metric, best_step)
      weights = {
        "checkpoints": [os.path.relpath(prefix, self.run_dir.checkpoints)],
        "chosen_by": f"best {self.best.metric} on validation",
      }
      return weights, (last_metrics if last_won else None)
    wanted = self.loop.average_checkpoints
    if wanted <= 1 or not self.is_chief:
      return {"checkpoints": [last], "chosen_by": "last"}, None
    kept = len(self.manager.checkpoints)
    if kept < wanted:  # a run shorter than the averaging window
      logging.warning(
        "--average_checkpoints=%d but only %d checkpoints are kept: averaging %d",
        wanted,
        kept,
        kept,
      )
    chosen = checkpoints.checkpoints_to_average(
      self.manager.directory, average_last=min(wanted, kept)
    )
    if len(chosen) > 1:
      logging.info("averaging the weights of %s", ", ".join(os.path.basename(p) for p in chosen))
      checkpoints.restore_average(self.model, chosen)
    return {
      "checkpoints": [os.path.basename(p) for p in chosen],
      "chosen_by": f"average of the last {len(chosen)}" if len(chosen) > 1 else "last",
    }, None

  def _final_evaluation(self, writer) -> Dict:
    """Validation, then test (judged once, whole) on the final weights; eval.json. Weights
    validated a moment ago (the best are the last) are not judged on validation again."""
    weights, validation = self._choose_final_weights(writer)
    note = self.kind.evaluation_note(self.decoding)
    if validation is None:
      logging.info(
        "final evaluation on up to %d validation examples%s", self.loop.eval_examples, note
      )
      validation = self.evaluate()
      self._report(writer, "validation", validation, label="final validation")
      self._attention_images(writer)
    else:
      logging.info("final validation: the weights judged above at step %d", self.step)
    result = {"step": self.step, "weights": weights, "validation": validation}
    if self.test_dataset is not None:
      logging.info("judging the test set, once%s", note)
      result["test"] = self.evaluate(self.test_dataset, max_examples=self.loop.test_examples)
      self._report(writer, "test", result["test"])
    if self.is_chief:
      run_files.write_evaluation(self.run_dir, result)
    return result

  def _attention_images(self, writer):
    """The attention of the first `attention_images` validation examples, drawn as TensorBoard
    images (the same examples every time), so alignment can be watched as it forms."""
    count = self.loop.attention_images
    if not count or not self.is_chief:
      return
    batch = {name: value[:count] for name, value in next(iter(self.validation_dataset)).items()}
    with writer.as_default(step=self.step):
      for i, picture in enumerate(self.kind.attention_maps(self.model, batch, self.tokenizers)):
        png = attention_plot.render_png(
          picture.weights,
          picture.keys,
          picture.queries,
          title=f"validation example {i}: {picture.title}",
        )
        tf.summary.image(f"attention/validation_example_{i}", attention_plot.image_tensor(png))

  def _report(self, writer, role: str, metrics: Dict, label: Optional[str] = None):
    """One log line (saying when the evaluation was partial) and TensorBoard scalars."""
    logging.info(
      "%s%s at step %d: %s",
      label or role,
      evaluation.coverage_note(metrics),
      self.step,
      "  ".join(
        f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}"
        for k, v in sorted(metrics.items())
        if evaluation.shown_metric(k, v)
      ),
    )
    if self.is_chief:
      with writer.as_default(step=self.step):
        for name, value in metrics.items():
          if isinstance(value, float):
            tf.summary.scalar(f"{role}/{name}", value)


def final_metrics(result: Dict) -> List[str]:
  """One line per role of a final evaluation, for the console."""
  lines = []
  for role in ("validation", "test"):
    if role in result:
      shown = {
        k: round(v, 4) if isinstance(v, float) else v
        for k, v in result[role].items()
        if evaluation.shown_metric(k, v)
      }
      lines.append(f"{role}{evaluation.coverage_note(result[role])}: {shown}")
      if "bleu_signature" in result[role]:  # how the BLEU was computed, for comparisons
        lines.append(f"{role} sacreBLEU signature: {result[role]['bleu_signature']}")
  return lines
