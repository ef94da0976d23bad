"""`python -m serving.export --serving_dtype=bfloat16`: the SavedModel stores its matmul weights
in bfloat16, says so in its export info and in serving.export.check's line, passes the check
(TF Serving's ops), and answers like the float32 export of the same run (a trained model's
bfloat16 translations: tests/end_to_end/test_recipes.py)."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from serving import export
from serving.export import check
from tfattn.decode_options import DecodeOptions

pytestmark = pytest.mark.slow  # exports (each test makes its own bfloat16 one)


def test_a_bfloat16_export_stores_bfloat16_weights_and_answers_like_float32(
  trained_run, exported, tmp_path
):
  options = DecodeOptions(strategy="greedy")
  low = export.export(
    str(trained_run), str(tmp_path / "bf16"), options=options, serving_dtype="bfloat16"
  )
  _, full = exported  # the same run and options in the run's float32 (the session's export)
  with open(os.path.join(low, export.EXPORT_INFO_FILE)) as f:
    info = json.load(f)
  assert info["compute_dtype"] == info["weights_dtype"] == "bfloat16"
  line = check.summary_line(low)
  assert line.startswith("OK ") and "computes in bfloat16, weights bfloat16" in line
  assert "computes in float32, weights float32" in check.summary_line(full)

  reader = tf.train.load_checkpoint(os.path.join(low, "variables", "variables"))
  dtypes, shapes = reader.get_variable_to_dtype_map(), reader.get_variable_to_shape_map()
  weights = [name for name in dtypes if name.startswith("variables/")]  # the export's list
  matrices = [name for name in weights if len(shapes[name]) == 2]  # kernels and tables
  assert matrices and all(dtypes[name] == tf.bfloat16 for name in matrices)
  in_float32 = [name for name in weights if dtypes[name] == tf.float32]
  assert in_float32 and all(len(shapes[name]) == 1 for name in in_float32)  # the norms

  def variable_bytes(path):
    folder = os.path.join(path, "variables")
    return sum(os.path.getsize(os.path.join(folder, name)) for name in os.listdir(folder))

  assert variable_bytes(low) < 0.6 * variable_bytes(full)  # the bulk is kernels and tables

  texts = tf.constant(["1 2 3", "40 5", "", "7 7 7 7"])
  loaded = {"low": tf.saved_model.load(low), "full": tf.saved_model.load(full)}
  answers = {
    name: model.signatures["translate_ids"](source_ids=tf.constant([[5, 6, 7], [8, 9, 0]]))
    for name, model in loaded.items()
  }
  assert answers["low"]["ids"].shape == answers["full"]["ids"].shape
  np.testing.assert_allclose(
    answers["low"]["log_prob"].numpy(), answers["full"]["log_prob"].numpy(), rtol=0.1, atol=0.5
  )
  served = loaded["low"].signatures["serving_default"](text=texts)
  assert served["translation"].shape == (4,)
