"""The settings a Marian / OPUS-MT model needs (issue 50) on a model trained from scratch: swish,
[sin | cos] positions, an output bias, the layer-norm epsilon, a decoder start id apart from
BOS, and the decoding rules (ids never generated, len^alpha, transformers' beam stop, a minimum
length, END at the limit). One tiny run learns the copy task with all of them, its files record
them, and its export answers what the library decodes with them."""

import json

import numpy as np
import pytest
import tensorflow as tf

from tfattn.support.run_dir import RunDir

from train_helpers import run_train

pytestmark = pytest.mark.slow

MODEL_FLAGS = (
  "--activation=swish",
  "--sinusoid_layout=halves",
  "--output_bias",
  "--layer_norm_epsilon=1e-5",
  "--decoder_start_id=0",  # Marian starts from its pad id
)
DECODE_FLAGS = (
  "--decode_strategy=beam",
  "--beam_size=3",
  "--alpha=1.0",
  "--length_penalty=power",
  "--beam_stop=current",
  "--min_decode_length=2",
  "--never_generate=1,3",
  "--end_at_limit",
)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
  run_dir = tmp_path_factory.mktemp("marian_settings")
  run_train(
    run_dir,
    *MODEL_FLAGS,
    *DECODE_FLAGS,
    "--train_steps=200",
    "--schedule=rsqrt",
    "--learning_rate=3e-3",
    "--warmup_steps=30",
    "--label_smoothing=0.0",
    "--dropout=0.0",
    "--log_every=20",
    timeout=400,
  )
  return run_dir


def test_a_run_from_scratch_learns_with_every_setting_and_records_them(run):
  layout = RunDir(run)
  with open(layout.model_config) as f:
    model = json.load(f)
  assert (model["activation"], model["sinusoid_layout"], model["output_bias"]) == (
    "swish",
    "halves",
    True,
  )
  assert (model["layer_norm_epsilon"], model["decoder_start_id"]) == (1e-5, 0)
  with open(layout.run_config) as f:
    decode = json.load(f)["decode"]
  assert decode["length_penalty"] == "power" and decode["beam_stop"] == "current"
  assert (decode["min_decode_length"], decode["never_generate"], decode["end_at_limit"]) == (
    2,
    "1,3",
    True,
  )
  with open(layout.train_log) as f:
    losses = [json.loads(line)["loss"] for line in f if '"loss"' in line]
  assert losses[-1] < 0.3 * losses[0], losses  # it learns: the decoder reads its start id
  with open(layout.eval_metrics) as f:
    assert json.load(f)["validation"]["token_accuracy"] > 0.3


def test_its_export_answers_what_the_library_decodes_with_them(run, tmp_path):
  from serving.export.saved_model import export
  from serving.export.trained_run import load_trained, run_decode_options
  from tfattn import decoding

  path = export(str(run), str(tmp_path / "models"))
  loaded = tf.saved_model.load(path)
  texts = ["3 1 4 1 5", "9 2 6", ""]
  answers = loaded.signatures["translate_ids"](
    source_ids=tf.ragged.constant([[7, 8, 9, 10], [11, 12]]).to_tensor()
  )
  trained = load_trained(str(run))
  options = run_decode_options(str(run))
  source = tf.ragged.constant([[7, 8, 9, 10], [11, 12]]).to_tensor()
  found = decoding.decode(trained.model, source, options)
  np.testing.assert_array_equal(answers["ids"], found.ids)
  np.testing.assert_allclose(answers["score"], found.scores, atol=1e-4)
  ids = answers["ids"].numpy()
  assert not np.isin(ids, [1, 3]).any()  # never generated
  for row in ids:  # at least two tokens before END, and END at the latest at the limit
    assert 2 in row and list(row).index(2) >= 2
  served = loaded.signatures["serving_default"](text=tf.constant(texts))
  expected = trained.tokenizers["target"].detokenize(
    decoding.decode(
      trained.model,
      trained.tokenizers["source"].tokenize(tf.constant(texts)).to_tensor(),
      options,
    ).ids
  )
  assert served["translation"].numpy().tolist() == expected.numpy().tolist()
