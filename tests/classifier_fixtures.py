"""A classifier run directory and its export, for the attention tests (the seq2seq ones are
in tests/conftest.py). Test modules import the fixtures; one export serves them all. (Not a
conftest.py: a second module named conftest would shadow `from conftest import ...`.)"""

import json
import os

import pytest
import tensorflow as tf
from built_once import built_once

import tfattn

CLASSIFIER_TEXTS = [
  f"{word} film number {i}" for i in range(40) for word in ("good", "bad", "fine", "great", "awful")
]


@pytest.fixture(scope="session")
def classifier_run(tmp_path_factory):
  """A run directory as `python -m train` leaves it for a tiny, untrained classifier with two
  encoder layers (a SentencePiece vocabulary, configs, a checkpoint)."""
  return built_once(
    tmp_path_factory, "classifier_run", lambda: _make_classifier_run(tmp_path_factory)
  )


def _make_classifier_run(tmp_path_factory):
  from tfattn import text
  from tfattn.support.run_dir import RunDir
  from train import tasks, tokenizer

  run_dir = tmp_path_factory.mktemp("classifier_run")
  layout = RunDir(run_dir)
  source = text.load_tokenizer(
    tokenizer.learn_and_write(
      tokenizer.SENTENCEPIECE,
      tf.data.Dataset.from_tensor_slices(CLASSIFIER_TEXTS),
      100,
      os.path.join(layout.vocab, "source"),
      lower_case=True,
    )
  )
  config = tfattn.TransformerConfig.preset(
    "tiny",
    source_vocab_size=source.vocab_size,
    target_vocab_size=source.vocab_size,
    d_model=32,
    dff=64,
    num_encoder_layers=2,
    num_decoder_layers=0,
    max_length=32,
    num_classes=3,
  )
  with open(layout.model_config, "w") as f:
    f.write(config.to_json())
  with open(layout.task, "w") as f:
    json.dump(
      {"name": "tsv", "kind": tasks.CLASSIFICATION, "num_classes": 3, "truncate": "right"}, f
    )
  model = tfattn.EncoderClassifier(config)
  tf.train.Checkpoint(model=model).save(os.path.join(layout.checkpoints, "ckpt"))
  return run_dir


@pytest.fixture(scope="session")
def classifier_exported(classifier_run, tmp_path_factory):
  """(base path, `<base>/1`) exported from `classifier_run`."""
  from serving import export

  def build():
    base = tmp_path_factory.mktemp("classifier_models")
    return base, export.export(str(classifier_run), str(base))

  return built_once(tmp_path_factory, "classifier_exported", build)
