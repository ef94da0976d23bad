"""Fine-tuning (issue 50): a run starts from another run's or an import's weights (--init_from)
with a new schedule and step counter and the same tokenizers, optionally frozen parts
(--freeze), and early stopping on validation (--early_stopping_patience, _min_delta)."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from tfattn.kinds import HIGHER, LOWER
from train.early_stopping import EarlyStopping
from train.import_marian import import_checkpoint

from train_helpers import SMALL_CONFIG, resume_and_go_on

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(__file__)), "fixtures", "marian")
ENGLISH = "the quick brown fox jumps over a lazy dog while people watch".split()
GERMAN = "der schnelle braune Fuchs springt über einen faulen Hund während Leute zusehen".split()


def _pairs(count, seed):
  """In-domain pairs: English words and their German words, in the same order."""
  rng = np.random.default_rng(seed)
  pairs = []
  for _ in range(count):
    index = rng.integers(0, len(ENGLISH), rng.integers(2, 6))
    pairs.append((" ".join(ENGLISH[i] for i in index), " ".join(GERMAN[i] for i in index)))
  return pairs


def _write(path, pairs):
  path.write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
  return str(path)


def _validation_loss(run_dir, pairs):
  """Mean teacher-forced token cross-entropy of `pairs` under the run's final weights."""
  from serving.export.trained_run import load_trained
  from tfattn import losses
  from tfattn.special_ids import END_ID, START_ID

  trained = load_trained(run_dir)
  source = trained.tokenizers["source"].tokenize(tf.constant([s for s, _ in pairs])).to_tensor(0)
  target = trained.tokenizers["target"].tokenize(tf.constant([t for _, t in pairs]))
  end = tf.fill([target.nrows(), 1], END_ID)
  start = tf.fill([target.nrows(), 1], START_ID)
  labels = tf.concat([target, end], 1).to_tensor(0)
  inputs = tf.concat([start, target], 1).to_tensor(0)
  token_losses, weights = losses.label_smoothed_cross_entropy(
    trained.model(source, inputs), labels, 0.0
  )
  return float(tf.reduce_sum(token_losses) / tf.reduce_sum(weights))


@pytest.fixture(scope="module")
def marian_run(tmp_path_factory):
  run_dir = str(tmp_path_factory.mktemp("import") / "run")
  import_checkpoint(os.path.join(FIXTURES, "shared"), run_dir)
  return run_dir


def _fine_tune_config(tmp_path, marian_run, **changes):
  from train.run_config import RunConfig

  fields = dict(
    run_dir=str(tmp_path / "tuned"),
    task="tsv",
    train_file=_write(tmp_path / "train.tsv", _pairs(400, 0)),
    validation_file=_write(tmp_path / "valid.tsv", _pairs(40, 1)),
    init_from=marian_run,
    train_steps=60,
    batch_size=16,
    max_length=32,
    schedule="constant",
    learning_rate=3e-3,
    warmup_steps=5,
    label_smoothing=0.0,
    dropout=0.0,
    log_every=20,
    eval_every=20,
    eval_examples=40,
    keep_best_by="token_accuracy",
    attention_images=0,
    strategy="one_device",
    jit_compile=False,
    decode={"strategy": "greedy", "max_decode_length": 16},
  )
  fields.update(changes)
  return RunConfig.of(**fields)


@pytest.mark.slow
def test_a_fine_tuned_import_lowers_validation_loss(tmp_path, marian_run):
  from train.trainer import Trainer, prepare

  config = _fine_tune_config(tmp_path, marian_run, freeze="embeddings")
  valid = _pairs(40, 1)
  before = _validation_loss(marian_run, valid)
  trainer = Trainer(*prepare(config))
  frozen = trainer.model.encoder.embedding.table.numpy()
  trainer.run()
  after = _validation_loss(config.run_dir, valid)
  assert after < 0.8 * before, (before, after)
  # The same tokenizers (the import's files), the import's model, a new step counter.
  assert sorted(os.listdir(os.path.join(config.run_dir, "vocab"))) == sorted(
    os.listdir(os.path.join(marian_run, "vocab"))
  )
  with open(os.path.join(config.run_dir, "model_config.json")) as f:
    assert json.load(f)["sinusoid_layout"] == "halves"
  assert trainer.step == 60
  np.testing.assert_array_equal(trainer.model.encoder.embedding.table.numpy(), frozen)


@pytest.mark.slow
def test_resume_after_a_kill_stays_exact_when_fine_tuning(tmp_path, marian_run):
  config = _fine_tune_config(tmp_path, marian_run, train_steps=6, freeze="encoder", eval_every=0)
  config = config.replace(keep_best_by=None)
  _, resumed = resume_and_go_on(config, steps=3)
  # The frozen encoder is the import's: neither run moved it.
  from serving.export.trained_run import load_trained

  imported = load_trained(marian_run).model
  for a, b in zip(resumed.model.encoder.trainable_variables, imported.encoder.trainable_variables):
    np.testing.assert_array_equal(a.numpy(), b.numpy())


@pytest.mark.slow
def test_early_stopping_ends_a_run_and_a_resume_stays_stopped(tmp_path):
  """A copy run whose validation accuracy cannot improve by 1.0 stops at its second
  evaluation, keeps the best weights, and a second start trains no further."""

  from train.trainer import Trainer, prepare

  config = SMALL_CONFIG.replace(
    run_dir=str(tmp_path / "run"),
    train_steps=40,
    eval_every=5,
    eval_examples=8,
    keep_best_by="token_accuracy",
    early_stopping_patience=2,
    early_stopping_min_delta=1.0,
    attention_images=0,
  )
  result = Trainer(*prepare(config)).run()
  with open(os.path.join(config.run_dir, "early_stopping.json")) as f:
    state = json.load(f)
  assert state["stopped_at"] == 15 and state["best_step"] == 5, state
  assert result["step"] == 15 and "best token_accuracy" in result["weights"]["chosen_by"]
  again = Trainer(*prepare(config))
  again.run()
  assert again.step == 15


@pytest.mark.parametrize(
  "direction,values,stops",
  [
    (HIGHER, [0.5, 0.7, 0.75, 0.72, 0.79], 5),  # min_delta 0.1: 0.7 improves, then no more
    (LOWER, [3.0, 2.0, 1.95, 1.99, 1.0], None),  # perplexity: 1.0 improves before patience 3
  ],
)
def test_early_stopping_counts_evaluations_without_improvement(tmp_path, direction, values, stops):
  stopping = EarlyStopping(str(tmp_path), "m", direction, patience=3, min_delta=0.1)
  stopped = None
  for step, value in enumerate(values, 1):
    if stopping.update({"m": value}, step) and stopped is None:
      stopped = step
  assert stopped == stops
  # The state is in the run directory: a resumed run reads it back.
  assert EarlyStopping(str(tmp_path), "m", direction, 3, 0.1).state == stopping.state


def test_the_settings_are_checked_before_anything_runs(tmp_path):

  with pytest.raises(ValueError, match="--early_stopping_patience needs --keep_best_by"):
    SMALL_CONFIG.replace(early_stopping_patience=2).check()
  with pytest.raises(ValueError, match="--freeze must be one of"):
    SMALL_CONFIG.replace(freeze="decoder").check()
  from train.init_from import check_source

  with pytest.raises(ValueError, match=r"no model_config\.json"):
    check_source(str(tmp_path), "seq2seq")
