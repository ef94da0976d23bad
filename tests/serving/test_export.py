"""Export: TF Serving layout, warm-up file, atomic versions, op preflight, reuse elsewhere."""

import json
import os
import site
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text as text

from serving import check, export, warmup

from train_helpers import REPO

pytestmark = pytest.mark.slow  # trains, exports or runs programs


def test_layout_follows_tf_serving(exported):
  base, path = exported
  assert os.path.basename(path) == "1"
  for required in ("saved_model.pb", "variables/variables.index", "assets/source.model",
                   "assets/target.model", warmup.WARMUP_FILE):
    assert os.path.exists(os.path.join(path, required)), required
  assert [n for n in os.listdir(base) if not n.isdigit()] == []  # no temp dirs left behind
  records = warmup.read_warmup_file(os.path.join(path, warmup.WARMUP_FILE))
  assert records and records[0][0] == "serving_default"
  assert records[0][1]["text"].dtype == object


def test_versions_increase_and_are_never_overwritten(trained_run, tmp_path):
  first = export.export(str(trained_run), str(tmp_path), beam_size=1)
  second = export.export(str(trained_run), str(tmp_path), beam_size=1)
  assert (os.path.basename(first), os.path.basename(second)) == ("1", "2")
  with pytest.raises(ValueError, match="already exists"):
    export.export(str(trained_run), str(tmp_path), version=2)
  with pytest.raises(ValueError, match="not a training run directory"):
    export.export(str(tmp_path), str(tmp_path))


def test_warmup_records_round_trip():
  record = warmup.prediction_log("m", "sig", {"text": np.array([b"a", b""], dtype=object),
                                              "ids": np.array([[1, 2]], np.int32)})
  signature, inputs = warmup.parse_prediction_log(record)
  assert signature == "sig"
  assert list(inputs["text"]) == [b"a", b""]
  np.testing.assert_array_equal(inputs["ids"], [[1, 2]])


def test_signatures_have_batch_dimension_and_names(exported):
  _, path = exported
  loaded = tf.saved_model.load(path)
  assert set(loaded.signatures) == {"serving_default", "translate_ids", "encode", "score",
                                    "attention"}
  serving = loaded.signatures["serving_default"]
  assert serving.structured_input_signature[1]["text"].shape.as_list() == [None]
  assert set(serving.structured_outputs) == {"translation", "score"}


def test_preflight_check_passes_and_names_a_foreign_op(exported, tmp_path):
  _, path = exported
  assert check.problems(path) == []
  ops = check.saved_model_ops(path)
  assert {"SentencepieceOp", "SentencepieceTokenizeOp", "SentencepieceDetokenizeOp"} <= set(ops)

  class Binarize(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def __call__(self, s):
      return text.utf8_binarize(s)

  bad = str(tmp_path / "bad")
  tf.saved_model.save(Binarize(), bad)
  found = check.problems(bad)
  assert found and "Utf8Binarize" in found[0] and "2.20" in found[0]


def test_check_command_runs_saved_model_cli(exported):
  base, _ = exported
  result = subprocess.run([sys.executable, "-m", "serving.check", str(base)],
                          capture_output=True, text=True, timeout=300,
                          cwd=REPO)
  assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
  assert "signature_def['serving_default']" in result.stdout
  assert "signature_def['attention']" in result.stdout  # listed for REST clients to find
  assert "OK: every op" in result.stdout


_ISOLATED = textwrap.dedent("""
    import json, sys
    for blocked in ("tfattn", "train", "serving"):
      sys.modules[blocked] = None  # importing them now fails: only TF and TF-Text are available
    import keras
    import tensorflow as tf
    import tensorflow_text  # noqa: F401
    path = sys.argv[1]
    obj = tf.saved_model.load(path)
    out = {}
    out["call"] = [t.decode() for t in obj(tf.constant(["12", "345"])).numpy()]
    sig = obj.signatures["serving_default"](text=tf.constant(["12", "345"]))
    out["signature"] = [t.decode() for t in sig["translation"].numpy()]
    ds = tf.data.Dataset.from_tensor_slices(["12", "345", "6"]).batch(2).map(obj)
    out["dataset"] = [t.decode() for batch in ds for t in batch.numpy()]
    layer = keras.layers.TFSMLayer(path, call_endpoint="serving_default")
    out["tfsm_layer"] = [t.decode() for t in layer(tf.constant(["12"]))["translation"].numpy()]
    out["num_trainable"] = len(obj.trainable_variables)
    out["regularization_losses"] = len(obj.regularization_losses)
    source = tf.constant([[5, 6, 0]]); target = tf.constant([[7, 8, 2]])
    before = [v.numpy().copy() for v in obj.trainable_variables]
    optimizer = keras.optimizers.SGD(0.5)
    with tf.GradientTape() as tape:
      loss = -tf.reduce_mean(obj.score(source, target)["log_prob"])
    grads = tape.gradient(loss, obj.trainable_variables)
    optimizer.apply_gradients(zip(grads, obj.trainable_variables))
    after_loss = -tf.reduce_mean(obj.score(source, target)["log_prob"])
    out["grads_present"] = sum(g is not None for g in grads)
    out["changed"] = sum(int((b != v.numpy()).any()) for b, v in zip(before,
                                                                      obj.trainable_variables))
    out["loss_before"], out["loss_after"] = float(loss), float(after_loss)
    print("RESULT " + json.dumps(out))
""")


def test_reusable_in_a_process_without_tfattn(exported):
  _, path = exported
  result = subprocess.run([sys.executable, "-c", _ISOLATED, path], capture_output=True,
                          text=True, timeout=300, env=dict(os.environ, PYTHONPATH=""),
                          cwd="/")
  assert result.returncode == 0, result.stderr[-4000:]
  out = json.loads(result.stdout.split("RESULT ", 1)[1])
  assert out["call"] == out["signature"] == out["dataset"][:2]
  assert len(out["dataset"]) == 3
  assert out["tfsm_layer"] == out["call"][:1]
  assert out["num_trainable"] > 0 and out["regularization_losses"] == 0
  assert out["grads_present"] > 0 and out["changed"] > 0
  assert out["loss_after"] < out["loss_before"]


def test_tf1_session_loader_gives_the_same_outputs(exported):
  _, path = exported
  texts = ["12", "345", ""]
  expected = tf.saved_model.load(path).signatures["serving_default"](text=tf.constant(texts))
  with tf.Graph().as_default(), tf.compat.v1.Session() as session:
    meta_graph = tf.compat.v1.saved_model.load(session, ["serve"], path)
    signature = meta_graph.signature_def["serving_default"]
    fetched = session.run({k: v.name for k, v in signature.outputs.items()},
                          {signature.inputs["text"].name: texts})
  assert list(fetched["translation"]) == list(expected["translation"].numpy())
  np.testing.assert_allclose(fetched["score"], expected["score"], atol=1e-5)


def test_invalid_utf8_is_rejected_by_the_signature(exported):
  _, path = exported
  serving = tf.saved_model.load(path).signatures["serving_default"]
  with pytest.raises(tf.errors.InvalidArgumentError):
    serving(text=tf.constant([b"\xff\xfe"]))


def test_export_averages_the_last_checkpoints(trained_run, tmp_path):
  import shutil

  import tfattn
  run_dir = tmp_path / "run"  # vocab and configs of trained_run, checkpoints of its own
  shutil.copytree(trained_run, run_dir, ignore=shutil.ignore_patterns("checkpoints"))
  config = tfattn.TransformerConfig.from_json((run_dir / "model_config.json").read_text())
  model = tfattn.Transformer(config)
  manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model),
                                       str(run_dir / "checkpoints"), max_to_keep=5)
  weights = []
  for step in range(3):  # three checkpoints whose weights differ
    for variable in model.trainable_variables:
      variable.assign(tf.random.stateless_normal(variable.shape, [step, 7]))
    weights.append([v.numpy() for v in model.trainable_variables])
    manager.save(checkpoint_number=10 + step)

  _, averaged, _, _ = export.load_trained(str(run_dir), average_last=2)
  for variable, older, newer in zip(averaged.trainable_variables, weights[1], weights[2]):
    np.testing.assert_allclose(variable.numpy(), (older + newer) / 2, rtol=1e-6, atol=1e-6)
  _, latest, _, _ = export.load_trained(str(run_dir))
  for variable, newest in zip(latest.trainable_variables, weights[2]):
    np.testing.assert_array_equal(variable.numpy(), newest)
  with pytest.raises(ValueError, match="only 3 checkpoints"):
    export.load_trained(str(run_dir), average_last=4)
  path = export.export(str(run_dir), str(tmp_path / "models"), beam_size=1, average_last=3)
  with open(os.path.join(path, export.EXPORT_INFO_FILE)) as f:
    assert json.load(f)["checkpoints"] == ["ckpt-10", "ckpt-11", "ckpt-12"]


@pytest.fixture(scope="module")
def graph_and_xla_exports(trained_run, tmp_path_factory):
  """{beam size: (graph export path, xla export path)} of the same weights."""
  base = tmp_path_factory.mktemp("decode_modes")
  return {beam: tuple(export.export(str(trained_run), str(base / f"{mode}-beam{beam}"),
                                    beam_size=beam, decode=mode) for mode in ("graph", "xla"))
          for beam in (1, 4)}


# Source lengths 1-24 tokens: both length buckets (16, 24) of the max_length-24 model.
_TEXTS = ["7", "12", "345", "", "4213", "123456", " ".join(["999"] * 5), " ".join(["77"] * 12)]


@pytest.mark.parametrize("beam", [1, 4])
def test_xla_export_answers_like_the_graph_export(graph_and_xla_exports, beam):
  graph, xla = (tf.saved_model.load(path) for path in graph_and_xla_exports[beam])
  texts = tf.constant(_TEXTS)
  lengths = graph.source_tokenizer.tokenize(texts).row_lengths().numpy()
  assert lengths.min() <= 16 < lengths.max(), lengths  # both buckets are exercised
  for batch in (texts, texts[:1], texts[-1:]):
    expected = graph.signatures["serving_default"](text=batch)
    result = xla.signatures["serving_default"](text=batch)
    assert list(result["translation"].numpy()) == list(expected["translation"].numpy())
    np.testing.assert_allclose(result["score"], expected["score"], atol=1e-4)
  ids = graph.source_tokenizer.tokenize(texts)[:, :24].to_tensor()
  expected = graph.signatures["translate_ids"](source_ids=ids)
  result = xla.signatures["translate_ids"](source_ids=ids)
  np.testing.assert_array_equal(result["ids"], expected["ids"])
  np.testing.assert_allclose(result["score"], expected["score"], atol=1e-4)


def test_xla_export_warms_up_every_length_bucket(graph_and_xla_exports, tmp_path):
  _, path = graph_and_xla_exports[4]
  with open(os.path.join(path, export.EXPORT_INFO_FILE)) as f:
    info = json.load(f)
  assert info["decode"] == "xla" and info["length_buckets"] == [16, 24]
  loaded = tf.saved_model.load(path)
  warmed = set()
  for signature, inputs in warmup.read_warmup_file(os.path.join(path, warmup.WARMUP_FILE)):
    assert signature == "serving_default"
    lengths = loaded.source_tokenizer.tokenize(tf.constant(inputs["text"])).row_lengths()
    warmed |= {next(b for b in info["length_buckets"] if b >= min(n, 24)) for n in lengths}
  assert warmed == {16, 24}


def test_xla_warmup_covers_each_requested_batch_size(trained_run, tmp_path):
  path = export.export(str(trained_run), str(tmp_path), beam_size=1, decode="xla",
                       warmup_batch_sizes=(1, 8))
  sizes = sorted(len(inputs["text"]) for _, inputs in
                 warmup.read_warmup_file(os.path.join(path, warmup.WARMUP_FILE)))
  assert sizes == [1, 1, 2, 8, 8]  # bucket 16 and 24 at batch 1 and 8, plus the generic pair
  with pytest.raises(ValueError, match="warmup_batch_sizes"):
    export.export(str(trained_run), str(tmp_path), decode="xla", warmup_batch_sizes=(0,))


def test_check_reports_must_compile_functions_and_the_tf_serving_flag(graph_and_xla_exports):
  graph, xla = graph_and_xla_exports[1]
  assert check.must_compile_functions(graph) == []
  assert check.must_compile_functions(xla)
  result = subprocess.run([sys.executable, "-m", "serving.check", xla], capture_output=True,
                          text=True, timeout=300,
                          cwd=REPO)
  assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
  assert check.XLA_CPU_FLAG in result.stdout


@pytest.mark.parametrize("decode", ["graph", "xla"])
def test_token_signatures_reject_ids_outside_the_vocabulary(graph_and_xla_exports, decode):
  loaded = tf.saved_model.load(graph_and_xla_exports[4][decode == "xla"])
  translate = loaded.signatures["translate_ids"]
  translate(source_ids=tf.constant([[5, 6]]))  # in range: answers
  for bad, reason in (([[5, 10_000]], "vocabulary size"), ([[5, -1]], "negative token id"),
                      ([[5] * 25], "max_length=24")):
    with pytest.raises(tf.errors.InvalidArgumentError, match=reason):
      translate(source_ids=tf.constant(bad))
  with pytest.raises(tf.errors.InvalidArgumentError, match="target_ids"):
    loaded.signatures["score"](source_ids=tf.constant([[5]]), target_ids=tf.constant([[10_000]]))
  with pytest.raises(tf.errors.InvalidArgumentError, match="vocabulary size"):
    loaded.signatures["encode"](source_ids=tf.constant([[10_000]]))


def test_check_runs_without_the_saved_model_cli_script(exported, tmp_path):
  """TensorFlow installed without console scripts beside the interpreter (pip --target): the
  check still shows the signatures."""
  base, _ = exported
  python = tmp_path / "bin" / "python"  # a bin/ folder holding no saved_model_cli
  python.parent.mkdir()
  python.symlink_to(sys.executable)
  result = subprocess.run([str(python), "-m", "serving.check", str(base)], capture_output=True,
                          text=True, timeout=300,
                          cwd=REPO,
                          env=dict(os.environ, PATH="/usr/bin:/bin",
                                   PYTHONPATH=os.pathsep.join(site.getsitepackages())))
  assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
  assert "signature_def['serving_default']" in result.stdout
