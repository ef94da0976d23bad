"""The classification path end to end: TSV -> Trainer -> export -> serving_default."""

import numpy as np
import pytest
import tensorflow as tf

from serving import export
from serving.export import check
from train.run_config import RunConfig
from train.trainer import Trainer, prepare

from train_helpers import image_summaries

pytestmark = pytest.mark.slow  # trains, exports or runs programs


def test_tsv_classifier_trains_exports_and_answers(tmp_path):
  rows = [
    f"{word} film number {i}\t{label}"
    for i in range(30)
    for word, label in (("good", 1), ("bad", 0), ("fine", 2))
  ]
  (tmp_path / "train.tsv").write_text("\n".join(rows) + "\n")
  config = RunConfig.of(
    run_dir=str(tmp_path / "run"),
    task="tsv",
    train_file=str(tmp_path / "train.tsv"),
    tsv_kind="classification",
    model="tiny",
    d_model=32,
    dff=64,
    num_heads=4,
    num_layers=1,
    dropout=0.0,
    vocab_size=100,
    vocab_examples=200,
    batch_size=8,
    max_length=16,
    train_steps=40,
    warmup_steps=5,
    schedule="rsqrt",
    learning_rate=3e-3,
    log_every=10,
    eval_examples=32,
    checkpoint_every=100,
  )
  validation = Trainer(*prepare(config)).run()["validation"]
  assert validation["examples"] == 32 and validation["accuracy"] > 0.5
  # The attention over the input of 3 validation examples, as TensorBoard images.
  assert sorted(image_summaries(tmp_path / "run")) == [
    f"attention/validation_example_{i}" for i in range(3)
  ]

  path = export.export(config.run_dir, str(tmp_path / "models"))
  assert check.problems(path) == []
  loaded = tf.saved_model.load(path)
  assert set(loaded.signatures) == {"serving_default", "classify_ids", "encode", "attention"}
  out = loaded.signatures["serving_default"](text=tf.constant(["good film", "bad film", ""]))
  assert out["label"].dtype == tf.int64 and out["label"].shape == (3,)
  assert out["probabilities"].shape == (3, 3)
  np.testing.assert_allclose(tf.reduce_sum(out["probabilities"], -1), 1.0, atol=1e-5)
  assert loaded(tf.constant(["good film"])).shape == (1, 3)
