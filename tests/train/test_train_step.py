"""The trainer's optimizer step: gradient accumulation over micro-batches of different shapes,
and the XLA-compiled step, against the plain step on the same data; K steps in one loop against
K loops of one step; where loops end."""

import numpy as np
import pytest
import tensorflow as tf

from train.trainer import Trainer, loop_end, prepare

from train_helpers import SMALL_CONFIG


def _batch(rng, rows, length, vocab):
  """A seq2seq batch (ids < vocab; the copy task learns a ~15-piece vocabulary) whose rows
  have different real lengths (<= length), zero-padded."""
  lengths = rng.integers(2, length + 1, size=rows)
  lengths[0] = length
  ids = rng.integers(4, vocab, size=(rows, length + 1))
  mask = np.arange(length + 1)[None, :] < lengths[:, None] + 1
  ids = np.where(mask, ids, 0)
  return {
    "source": ids[:, 1:] * mask[:, 1:],
    "target_in": ids[:, :-1] * mask[:, 1:],
    "target_out": ids[:, 1:] * mask[:, 1:],
  }


def _pad_and_join(a, b):
  length = max(a["source"].shape[1], b["source"].shape[1])

  def pad(x):
    return np.pad(x, [(0, 0), (0, length - x.shape[1])])

  return {k: np.concatenate([pad(a[k]), pad(b[k])]) for k in a}


@pytest.fixture(scope="module")
def first_step(tmp_path_factory):
  """`first_step(batches, **overrides)`: runs one step of a Trainer on `batches` (a cycle) and
  returns (loss, count, shapes, gradients). One Trainer per configuration serves every test of
  this module that asks for it (building one and tracing its loop takes seconds): its optimizer
  update is replaced by a capture of the gradients, so its weights never change between calls."""
  trainers = {}

  def run(batches, **overrides):
    config = SMALL_CONFIG.replace(**overrides)
    key = repr(config)
    if key not in trainers:
      run_dir = tmp_path_factory.mktemp("step")
      trainer = Trainer(*prepare(config.replace(run_dir=str(run_dir))))
      captured = [tf.Variable(tf.zeros_like(v)) for v in trainer.model.trainable_variables]

      def capture(pairs, captured=captured):  # stands in for Adam, whose first step hides
        for (gradient, _), slot in zip(pairs, captured):  # gradient differences
          slot.assign(gradient)

      trainer.optimizer.apply_gradients = capture
      trainers[key] = trainer, captured
    trainer, captured = trainers[key]
    for slot in captured:  # a gradient of this call only
      slot.assign(tf.zeros_like(slot))
    weights = [v.numpy() for v in trainer.model.trainable_variables]
    dataset = tf.data.Dataset.from_tensor_slices(
      {k: tf.ragged.constant([b[k].tolist() for b in batches]) for k in batches[0]}
    )
    dataset = dataset.map(lambda b: {k: tf.cast(v.to_tensor(), tf.int32) for k, v in b.items()})
    (loss, _, count, _), shapes = trainer._train_loop(iter(dataset), tf.constant(1))
    for before, after in zip(weights, trainer.model.trainable_variables):
      np.testing.assert_array_equal(after.numpy(), before)  # the shared Trainer is unchanged
    return float(loss) / float(count), float(count), shapes.numpy(), [v.numpy() for v in captured]

  return run


@pytest.mark.slow
def test_two_micro_batches_give_the_gradient_of_their_union(first_step):
  rng = np.random.default_rng(0)
  a, b = _batch(rng, 4, 5, 12), _batch(rng, 4, 9, 12)
  whole = first_step([_pad_and_join(a, b)], grad_accum_steps=1)  # xla test's graph Trainer
  accumulated = first_step([a, b], grad_accum_steps=2)
  assert accumulated[1] == whole[1]  # the same target tokens counted
  assert accumulated[2].tolist() == [[4, 5, 5], [4, 9, 9]]
  np.testing.assert_allclose(accumulated[0], whole[0], rtol=1e-5)
  for accumulated_grad, whole_grad in zip(accumulated[3], whole[3]):
    np.testing.assert_allclose(accumulated_grad, whole_grad, atol=2e-6)


@pytest.mark.slow
@pytest.mark.parametrize("accumulate", [1, 2])
def test_the_xla_step_computes_the_graph_step(first_step, accumulate):
  rng = np.random.default_rng(1)
  batches = [_batch(rng, 8, 8, 12), _batch(rng, 8, 16, 12)][:accumulate]
  graph = first_step(batches, grad_accum_steps=accumulate)
  xla = first_step(batches, grad_accum_steps=accumulate, jit_compile=True)
  np.testing.assert_allclose(xla[0], graph[0], rtol=1e-5)
  for xla_grad, graph_grad in zip(xla[3], graph[3]):
    np.testing.assert_allclose(xla_grad, graph_grad, atol=1e-5)


@pytest.fixture(scope="module")
def averaging_runs(tmp_path_factory):
  """Runs trained side by side: two averaging their last 3 checkpoints (one of 6 steps that
  decodes by sampling and exports, one of 4 steps keeping only 2 checkpoints), and one keeping
  its best checkpoint on validation, which exports. Returns (folder, outputs)."""
  from train_helpers import run_trains

  tmp = tmp_path_factory.mktemp("averaging")
  averaging = ("--checkpoint_every=2", "--keep_checkpoints=3", "--average_checkpoints=3")
  outputs = run_trains(
    (
      tmp / "run",
      "--train_steps=6",
      *averaging,
      f"--export_base_path={tmp / 'models'}",
      *("--decode_strategy=sample", "--top_k=3", "--sample_seed=7"),
    ),
    (tmp / "short", "--train_steps=4", *averaging),
    (
      tmp / "best",
      "--train_steps=6",
      "--eval_every=2",
      "--keep_best_by=token_accuracy",
      "--attention_images=3",
      f"--export_base_path={tmp / 'best_models'}",
      "--export_decode=graph",
    ),
  )
  return tmp, outputs


@pytest.mark.slow
def test_final_evaluation_and_export_use_the_averaged_checkpoints(averaging_runs):
  import json

  from serving import export

  tmp, _ = averaging_runs
  with open(tmp / "run" / "eval.json") as f:
    assert json.load(f)["weights"] == {
      "checkpoints": ["ckpt-2", "ckpt-4", "ckpt-6"],
      "chosen_by": "average of the last 3",
    }
  with open(tmp / "models" / "1" / export.EXPORT_INFO_FILE) as f:
    assert json.load(f)["checkpoints"] == ["ckpt-2", "ckpt-4", "ckpt-6"]


@pytest.mark.slow
def test_training_exports_with_its_decoding_options(averaging_runs):
  """`python -m train --decode_strategy=sample --top_k=... --export_base_path=...`: evaluation
  samples as the export serves, and the export has the `sample` signature beside n-best."""
  import json

  import tensorflow as tf

  from serving import export
  from tfattn.decode_options import DecodeOptions

  tmp, _ = averaging_runs
  with open(tmp / "models" / "1" / export.EXPORT_INFO_FILE) as f:
    options = json.load(f)["decode_options"]
  assert options == DecodeOptions(strategy="sample", top_k=3, seed=7).to_dict()
  signatures = tf.saved_model.load(str(tmp / "models" / "1")).signatures
  assert {"sample", "translate_nbest", "serving_default"} <= set(signatures)
  seeds = tf.constant([1, 1], tf.int64)
  first, second = (
    signatures["sample"](text=tf.constant(["ab", "ab"]), seed=seeds)["translation"]
    for _ in range(2)
  )
  assert first.numpy().tolist() == second.numpy().tolist()  # a request's answer repeats


@pytest.mark.slow
def test_a_run_shorter_than_the_averaging_window_averages_what_it_kept(averaging_runs):
  import json

  tmp, outputs = averaging_runs
  assert "only 2 checkpoints are kept: averaging 2" in outputs[1]
  with open(tmp / "short" / "eval.json") as f:
    assert json.load(f)["weights"]["checkpoints"] == ["ckpt-2", "ckpt-4"]


@pytest.mark.slow
def test_keep_best_by_judges_tests_and_exports_the_best_validation_weights(averaging_runs):
  """Validation at steps 2, 4 and 6: the kept weights are those of the highest value, the final
  evaluation judges them (the same validation value again) and the export serves them."""
  import json
  import re

  from serving import export

  tmp, outputs = averaging_runs
  values = {
    int(step): float(value)
    for step, value in re.findall(
      r"\] validation \(partial: the first 16 examples\) at step (\d+): .*token_accuracy ([0-9.]+)",
      outputs[2],
    )
  }
  assert sorted(values) == [2, 4, 6], outputs[2][-3000:]
  best_step = max(sorted(values), key=lambda step: values[step])  # the first of equal values
  with open(tmp / "best" / "eval.json") as f:
    result = json.load(f)
  assert result["weights"] == {
    "checkpoints": [f"best/best-{best_step}"],
    "chosen_by": "best token_accuracy on validation",
  }
  assert abs(result["validation"]["token_accuracy"] - values[best_step]) < 1e-4
  assert "test" in result and "Sharding callback" not in outputs[2]
  # TensorBoard's Images tab: the cross-attention of 3 fixed validation examples at every
  # evaluation (steps 2, 4, 6 and the final one).
  from train_helpers import image_summaries

  images = image_summaries(tmp / "best")
  assert sorted(images) == [f"attention/validation_example_{i}" for i in range(3)]
  assert all(set(steps) == {2, 4, 6} for steps in images.values())
  with open(tmp / "best_models" / "1" / export.EXPORT_INFO_FILE) as f:
    info = json.load(f)
  assert info["checkpoints"] == [f"best-{best_step}"]
  # --export_decode=graph: recorded by the run (default "auto") and obeyed by its export.
  with open(tmp / "best" / "run_config.json") as f:
    assert json.load(f)["export_decode"] == "graph"
  assert info["decode"] == "graph"


def test_loops_end_at_every_log_checkpoint_and_evaluation_step_and_the_last():
  config = SMALL_CONFIG.replace(
    train_steps=1000,
    steps_per_loop=50,
    log_every=100,
    checkpoint_every=120,
    eval_every=0,
  )
  ends, step = [], 0
  while step < config.loop.train_steps:
    step = loop_end(step, config.loop)
    ends.append(step)
  assert ends[:6] == [50, 100, 120, 170, 200, 240]
  assert set(range(100, 1001, 100)) | set(range(120, 1000, 120)) <= set(ends)
  assert ends[-1] == 1000 and all(b - a <= 50 for a, b in zip([0, *ends], ends))
  assert loop_end(990, config.replace(eval_every=7).loop) == 994
  assert loop_end(0, config.replace(steps_per_loop=1).loop) == 1


@pytest.fixture
def deterministic_ops():
  """TF op determinism for one test, then off again (it is process-wide)."""
  from tensorflow.python.framework import config as tf_config

  was_enabled = tf_config.is_op_determinism_enabled()
  tf.config.experimental.enable_op_determinism()
  yield
  if not was_enabled:
    tf_config.disable_op_determinism()


def _state(trainer):
  return [v.numpy() for v in [*trainer.model.variables, *trainer.optimizer.variables]]


def _train_loops(trainer, loops):
  """Calls the train loop once per entry of `loops` (steps in that call); returns the summed
  loss sums and the weights (model and optimizer) after."""
  totals = np.zeros(4)
  for steps in loops:
    sums, shapes = trainer._train_loop(trainer.iterator, tf.constant(steps))
    assert shapes.shape == (steps * trainer.config.loop.grad_accum_steps, 3)
    totals += [float(x) for x in sums]
  return totals, _state(trainer)


@pytest.mark.slow  # builds a Trainer and traces its loop (~14 s), as this file's other tests
@pytest.mark.parametrize(
  "overrides",
  [
    {},
    # Gradient accumulation, token batching and XLA length buckets, all inside the loop.
    dict(grad_accum_steps=2, batch_tokens=96, batch_size=None, jit_compile=True),
  ],
  ids=["plain", "accumulated_token_batches_xla"],
)
def test_k_steps_in_one_loop_give_the_weights_of_k_loops_of_one_step(
  tmp_path, deterministic_ops, overrides
):
  """From one saved state (weights, optimizer, data position, dropout generator): 4 steps in
  one call, then back to that state and 4 calls of one step."""
  config = SMALL_CONFIG.replace(run_dir=str(tmp_path / "run"), dropout=0.1, **overrides)
  trainer = Trainer(*prepare(config))
  start = trainer.checkpoint.write(str(tmp_path / "start"))
  one_loop = _train_loops(trainer, [4])
  assert trainer.step == 4
  trainer.checkpoint.read(start).assert_consumed()
  assert trainer.step == 0
  single = _train_loops(trainer, [1, 1, 1, 1])
  np.testing.assert_allclose(one_loop[0], single[0], rtol=1e-6)  # loss, correct, count, tokens
  assert one_loop[0][2] > 0
  for a, b in zip(one_loop[1], single[1]):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.slow  # builds two Trainers and traces their loops
def test_the_one_replica_xla_step_updates_the_weights_as_the_graph_step(tmp_path):
  """One replica under XLA compiles the optimizer's update (AdamW with its weight-decay
  exclusion, after clipping, over two micro-batches) into the step's program: after 2 steps on
  the same batches its weights and optimizer slots are the plain graph step's."""
  rng = np.random.default_rng(2)
  batches = [_batch(rng, 8, 8, 12), _batch(rng, 8, 16, 12)] * 2
  dataset = tf.data.Dataset.from_tensor_slices(
    {k: tf.ragged.constant([b[k].tolist() for b in batches]) for k in batches[0]}
  ).map(lambda b: {k: tf.cast(v.to_tensor(), tf.int32) for k, v in b.items()})
  # Adam's epsilon is raised from the run's 1e-9: the key bias's gradient is zero in exact
  # arithmetic (softmax ignores a shift), and epsilon 1e-9 turns its rounding noise, which
  # differs between programs, into updates of up to the learning rate in either direction.
  # The decay (1e-3 x 1.0 x the weight) moves matrices by well over the tolerance.
  common = dict(
    optimizer="adamw",
    weight_decay=1.0,
    clip_norm=0.5,
    grad_accum_steps=2,
    schedule="constant",
    learning_rate=1e-3,
    warmup_steps=1,
  )
  states = {}  # prepare() seeds the stateless initialisers alike
  for jit_compile in (False, True):
    config = SMALL_CONFIG.replace(
      run_dir=str(tmp_path / f"jit{jit_compile}"), jit_compile=jit_compile, **common
    )
    trainer = Trainer(*prepare(config))
    trainer.optimizer.epsilon = 1e-6  # read when the loop is first traced, below
    initial = [v.numpy() for v in trainer.model.trainable_variables]
    sums, _ = trainer._train_loop(iter(dataset), tf.constant(2))
    assert trainer.step == 2 and float(sums[2]) > 0
    moved = [
      np.abs(v.numpy() - w).max() for v, w in zip(trainer.model.trainable_variables, initial)
    ]
    assert min(moved) > 1e-4  # every variable moved: a missed update fails the comparison
    states[jit_compile] = _state(trainer)
  for xla, graph in zip(states[True], states[False]):
    np.testing.assert_allclose(xla, graph, atol=1e-5)


@pytest.mark.slow  # builds two Trainers and compiles their step
def test_float16_in_the_one_replica_xla_step_scales_the_loss_skips_overflows_and_resumes(tmp_path):
  """`--mixed_precision=mixed_float16 --jit_compile` on one replica: the LossScaleOptimizer's
  update runs inside the step's XLA program. A language model trains in float16 with float32
  weights; its loss scale and the count of finite steps resume exactly with the weights; a
  step whose scaled gradients overflow float16 changes no weight and halves the scale."""
  import keras

  from train_helpers import resume_and_go_on, tiny_text_run

  config = tiny_text_run(
    tmp_path,
    mixed_precision="mixed_float16",
    jit_compile=True,
    strategy="one_device",
    train_steps=6,
    schedule="constant",  # steps after train_steps still learn
    learning_rate=1e-3,
    warmup_steps=1,
    eval_examples=8,
  )
  _, trainer = resume_and_go_on(config)
  assert trainer.model_config.compute_dtype == "float16"
  assert {v.dtype for v in trainer.model.trainable_variables} == {tf.float32}
  optimizer = trainer.optimizer
  assert isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
  assert int(optimizer.step_counter) == 6  # every step was finite, counted inside XLA
  weights = [v.numpy() for v in trainer.model.trainable_variables]

  optimizer.dynamic_scale.assign(2.0**100)  # float16 gradients overflow at this scale
  sums, _ = trainer._train_loop(trainer.iterator, tf.constant(1))
  assert np.isfinite(float(sums[0]))  # the loss itself is not scaled
  assert trainer.step == 6  # Keras counts the steps it applies
  assert float(optimizer.dynamic_scale) == 2.0**99 and int(optimizer.step_counter) == 0
  for before, after in zip(weights, trainer.model.trainable_variables):
    np.testing.assert_array_equal(after.numpy(), before)  # the step was skipped

  optimizer.dynamic_scale.assign(2.0**15)
  trainer._train_loop(trainer.iterator, tf.constant(1))
  assert int(optimizer.step_counter) == 1
  moved = [np.abs(v.numpy() - w).max() for v, w in zip(trainer.model.trainable_variables, weights)]
  assert max(moved) > 0
