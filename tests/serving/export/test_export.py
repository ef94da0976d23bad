"""Export: TF Serving layout, warm-up file, atomic versions, op preflight, reuse elsewhere."""

import collections
import functools
import json
import os
import shutil
import site
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text as text

import tfattn
from serving import export
from serving.export import check
from serving.server.model_manager import ModelManager
from serving.server.rest_api import make_server
from serving.tf_serving import warmup
from serving.tools.client import ServingClient
from tfattn.decode_options import DecodeOptions

import warm_start
from train_helpers import REPO, assert_same_answers_but_a_near_tie, run_without_tfattn

# The session's and this module's exports, loaded once per test process: these tests only call
# their signatures, and a second load would trace (and for XLA, compile) them again.
_load = functools.cache(tf.saved_model.load)

pytestmark = pytest.mark.slow  # trains, exports or runs programs
GREEDY = DecodeOptions(strategy="greedy")


def test_layout_follows_tf_serving(exported):
  base, path = exported
  assert os.path.basename(path) == "1"
  for required in (
    "saved_model.pb",
    "variables/variables.index",
    "assets/source.model",
    "assets/target.model",
    warmup.WARMUP_FILE,
  ):
    assert os.path.exists(os.path.join(path, required)), required
  assert [n for n in os.listdir(base) if not n.isdigit()] == []  # no temp dirs left behind
  records = warmup.read_warmup_file(os.path.join(path, warmup.WARMUP_FILE))
  assert records and records[0][0] == "serving_default"
  assert records[0][1]["text"].dtype == object


def test_warmup_records_round_trip():
  record = warmup.prediction_log(
    "m", "sig", {"text": np.array([b"a", b""], dtype=object), "ids": np.array([[1, 2]], np.int32)}
  )
  signature, inputs = warmup.parse_prediction_log(record)
  assert signature == "sig"
  assert list(inputs["text"]) == [b"a", b""]
  np.testing.assert_array_equal(inputs["ids"], [[1, 2]])


def test_signatures_have_batch_dimension_and_names(exported):
  _, path = exported
  loaded = _load(path)
  assert set(loaded.signatures) == {
    "serving_default",
    "translate_nbest",
    "translate_ids",
    "encode",
    "score",
    "attention",
  }
  serving = loaded.signatures["serving_default"]
  assert serving.structured_input_signature[1]["text"].shape.as_list() == [None]
  assert set(serving.structured_outputs) == {"translation", "score", "log_prob"}
  nbest = loaded.signatures["translate_nbest"]
  assert {name: spec.shape.as_list() for name, spec in nbest.structured_outputs.items()} == {
    "translation": [None, 4],
    "score": [None, 4],
    "log_prob": [None, 4],
  }  # options.beam_size


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


def test_check_fails_a_version_whose_warm_up_the_server_refuses(exported, tmp_path):
  """A version whose warm-up request fails does not load in TF Serving nor in serving.server;
  check replays the records as the server does and says which one fails (it said OK before)."""
  _, path = exported
  refused = tmp_path / "refused" / "1"
  shutil.copytree(path, refused)
  requests = [
    ("serving_default", {"text": np.array([b"12"], dtype=object)}),
    ("translate_ids", {"source_ids": np.array([[5, 10_000]], np.int32)}),
  ]
  warmup.write_warmup_file(str(refused / warmup.WARMUP_FILE), "numbers", requests)
  line = check.summary_line(str(refused))
  assert line.startswith(f"FAIL {refused}: warm-up request 2 of 2 (translate_ids) fails with ")
  assert "INVALID_ARGUMENT" in line and "vocabulary size" in line
  assert check.summary_line(path).startswith("OK ")  # its own records answer
  manager = ModelManager("numbers", str(refused.parent), poll_seconds=60)
  assert not manager._load(1, str(refused))  # the server's load: the same verdict


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
  out = run_without_tfattn(_ISOLATED, path)
  assert out["call"] == out["signature"] == out["dataset"][:2]
  assert len(out["dataset"]) == 3
  assert out["tfsm_layer"] == out["call"][:1]
  assert out["num_trainable"] > 0 and out["regularization_losses"] == 0
  assert out["grads_present"] > 0 and out["changed"] > 0
  assert out["loss_after"] < out["loss_before"]


def test_tf1_session_loader_gives_the_same_outputs(exported):
  _, path = exported
  texts = ["12", "345", ""]
  expected = _load(path).signatures["serving_default"](text=tf.constant(texts))
  with tf.Graph().as_default(), tf.compat.v1.Session() as session:
    meta_graph = tf.compat.v1.saved_model.load(session, ["serve"], path)
    signature = meta_graph.signature_def["serving_default"]
    fetched = session.run(
      {k: v.name for k, v in signature.outputs.items()}, {signature.inputs["text"].name: texts}
    )
  assert list(fetched["translation"]) == list(expected["translation"].numpy())
  np.testing.assert_allclose(fetched["score"], expected["score"], atol=1e-5)


def test_invalid_utf8_is_rejected_by_the_signature(exported):
  _, path = exported
  serving = _load(path).signatures["serving_default"]
  with pytest.raises(tf.errors.InvalidArgumentError):
    serving(text=tf.constant([b"\xff\xfe"]))


def test_export_averages_the_last_checkpoints_and_versions_increase(trained_run, tmp_path):
  """Averaged weights; then a second export of the same run to the same base: version 2, and
  neither version is ever overwritten."""
  import shutil

  import tfattn

  run_dir = tmp_path / "run"  # vocab and configs of trained_run, checkpoints of its own
  shutil.copytree(trained_run, run_dir, ignore=shutil.ignore_patterns("checkpoints"))
  config = tfattn.TransformerConfig.from_json((run_dir / "model_config.json").read_text())
  model = tfattn.Transformer(config)
  manager = tf.train.CheckpointManager(
    tf.train.Checkpoint(model=model), str(run_dir / "checkpoints"), max_to_keep=5
  )
  weights = []
  for step in range(3):  # three checkpoints whose weights differ
    for variable in model.trainable_variables:
      variable.assign(tf.random.stateless_normal(variable.shape, [step, 7]))
    weights.append([v.numpy() for v in model.trainable_variables])
    manager.save(checkpoint_number=10 + step)

  averaged = export.load_trained(str(run_dir), average_last=2).model
  for variable, older, newer in zip(averaged.trainable_variables, weights[1], weights[2]):
    np.testing.assert_allclose(variable.numpy(), (older + newer) / 2, rtol=1e-6, atol=1e-6)
  latest = export.load_trained(str(run_dir)).model
  for variable, newest in zip(latest.trainable_variables, weights[2]):
    np.testing.assert_array_equal(variable.numpy(), newest)
  with pytest.raises(ValueError, match="only 3 checkpoints"):
    export.load_trained(str(run_dir), average_last=4)
  base = str(tmp_path / "models")
  first = export.export(str(run_dir), base, options=GREEDY, average_last=3)
  with open(os.path.join(first, export.EXPORT_INFO_FILE)) as f:
    assert json.load(f)["checkpoints"] == ["ckpt-10", "ckpt-11", "ckpt-12"]
  second = export.export(str(run_dir), base, options=GREEDY)
  assert (os.path.basename(first), os.path.basename(second)) == ("1", "2")
  with pytest.raises(ValueError, match="already exists"):
    export.export(str(run_dir), base, version=2)
  with pytest.raises(ValueError, match="not a training run directory"):
    export.export(base, base)


@pytest.fixture(scope="module")
def graph_and_xla_exports(trained_run, exported, xla_exported, tmp_path_factory):
  """{beam size: (graph export path, xla export path)} of the same weights. Beam size 1: the
  session's greedy exports (a beam of one runs the greedy loop: decoding.decode)."""
  base = tmp_path_factory.mktemp("decode_modes")
  beam4 = tuple(
    export.export(
      str(trained_run), str(base / f"{mode}-beam4"), options=DecodeOptions(beam_size=4), decode=mode
    )
    for mode in ("graph", "xla")
  )
  return {1: (exported[1], xla_exported[1]), 4: beam4}


# Source lengths 1-24 tokens: both length buckets (16, 24) of the max_length-24 model.
_TEXTS = ["7", "12", "345", "", "4213", "123456", " ".join(["999"] * 5), " ".join(["77"] * 12)]


@pytest.mark.parametrize("beam", [1, 4])
def test_xla_export_answers_like_the_graph_export(graph_and_xla_exports, beam):
  graph, xla = (_load(path) for path in graph_and_xla_exports[beam])
  texts = tf.constant(_TEXTS)
  lengths = graph.source_tokenizer.tokenize(texts).row_lengths().numpy()
  assert lengths.min() <= 16 < lengths.max(), lengths  # both buckets are exercised
  # Beam 4: translate_nbest is serving_default's compiled search (no extra compile to pay here);
  # an n-best search of its own is compared over REST in the sampling test below.
  signatures = ("serving_default", "translate_nbest") if beam > 1 else ("serving_default",)
  for batch in (texts, texts[:1], texts[-1:]):
    for signature in signatures:
      expected = graph.signatures[signature](text=batch)
      result = xla.signatures[signature](text=batch)
      assert result["translation"].numpy().tolist() == expected["translation"].numpy().tolist()
      for name in ("score", "log_prob"):
        np.testing.assert_allclose(result[name], expected[name], atol=1e-4)
  ids = graph.source_tokenizer.tokenize(texts)[:, :24].to_tensor()
  expected = graph.signatures["translate_ids"](source_ids=ids)
  result = xla.signatures["translate_ids"](source_ids=ids)
  np.testing.assert_array_equal(result["ids"], expected["ids"])
  np.testing.assert_allclose(result["score"], expected["score"], atol=1e-4)
  np.testing.assert_allclose(result["log_prob"], expected["log_prob"], atol=1e-4)


def test_xla_export_warms_up_every_length_bucket(graph_and_xla_exports, tmp_path):
  _, path = graph_and_xla_exports[4]
  with open(os.path.join(path, export.EXPORT_INFO_FILE)) as f:
    info = json.load(f)
  assert info["decode"] == "xla" and info["length_buckets"] == [16, 24]
  loaded = _load(path)
  warmed = {}
  for signature, inputs in warmup.read_warmup_file(os.path.join(path, warmup.WARMUP_FILE)):
    lengths = loaded.source_tokenizer.tokenize(tf.constant(inputs["text"])).row_lengths()
    warmed.setdefault(signature, set()).update(
      next(b for b in info["length_buckets"] if b >= min(n, 24)) for n in lengths
    )
  # Beam 4: serving_default's search is translate_nbest's, one compiled program for both.
  assert warmed["serving_default"] == {16, 24}


def test_xla_warmup_covers_each_requested_batch_size(trained_run, tmp_path):
  path = export.export(
    str(trained_run), str(tmp_path), options=GREEDY, decode="xla", warmup_batch_sizes=(1, 8)
  )
  sizes = {}
  for signature, inputs in warmup.read_warmup_file(os.path.join(path, warmup.WARMUP_FILE)):
    sizes.setdefault(signature, []).append(len(inputs["text"]))
  # Greedy and the n-best beam search are two programs: bucket 16 and 24 at batch 1 and 8 for
  # each, plus the generic pair.
  assert sizes == {"serving_default": [2, 1, 1, 8, 8], "translate_nbest": [2, 1, 1, 8, 8]}
  with pytest.raises(ValueError, match="warmup_batch_sizes"):
    export.export(str(trained_run), str(tmp_path), decode="xla", warmup_batch_sizes=(0,))


def test_check_reports_must_compile_functions_and_the_tf_serving_flag(graph_and_xla_exports):
  graph, xla = graph_and_xla_exports[1]
  assert check.must_compile_functions(graph) == []
  assert check.must_compile_functions(xla)
  result = subprocess.run(
    # --nowarmup: the replay would compile every program (tested on a graph export below).
    [*warm_start.python(), "-m", "serving.export.check", "--nowarmup", xla],
    env=warm_start.environment(),
    capture_output=True,
    text=True,
    timeout=300,
    cwd=REPO,
  )
  assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
  # One line: the flag of each TF Serving build (CPU any version, GPU >= 2.18), GPU <= 2.17 none.
  (line,) = result.stdout.splitlines()
  assert f"XLA: {len(check.must_compile_functions(xla))} function(s) must compile" in line
  for needs in (
    "CPU images (any version) need --xla_cpu_compilation_enabled=true",
    "GPU images >= 2.18 need --xla_gpu_compilation_enabled=true",
    "GPU images <= 2.17 cannot serve it",
  ):
    assert needs in line
  assert "XLA: none must compile (TF Serving CPU and GPU images load it with no flag)" in (
    check.summary_line(graph, replay_warmup=False)
  )


@pytest.mark.parametrize("decode", ["graph", "xla"])
def test_token_signatures_reject_ids_outside_the_vocabulary(graph_and_xla_exports, decode):
  loaded = _load(graph_and_xla_exports[4][decode == "xla"])
  translate = loaded.signatures["translate_ids"]
  translate(source_ids=tf.constant([[5, 6]]))  # in range: answers
  for bad, reason in (
    ([[5, 10_000]], "vocabulary size"),
    ([[5, -1]], "negative token id"),
    ([[5] * 25], "max_length=24"),
  ):
    with pytest.raises(tf.errors.InvalidArgumentError, match=reason):
      translate(source_ids=tf.constant(bad))
  with pytest.raises(tf.errors.InvalidArgumentError, match="target_ids"):
    loaded.signatures["score"](source_ids=tf.constant([[5]]), target_ids=tf.constant([[10_000]]))
  with pytest.raises(tf.errors.InvalidArgumentError, match="vocabulary size"):
    loaded.signatures["encode"](source_ids=tf.constant([[10_000]]))


def test_check_prints_one_line_per_version_and_the_whole_dump_with_verbose(exported, tmp_path):
  """One line per version by default; `--verbose` adds every op, each signature and
  saved_model_cli's dump, also where TensorFlow was installed without console scripts beside the
  interpreter (pip --target)."""
  base, _ = exported
  python = tmp_path / "bin" / "python"  # a bin/ folder holding no saved_model_cli
  python.parent.mkdir()
  python.symlink_to(sys.executable)
  no_scripts = dict(
    os.environ, PATH="/usr/bin:/bin", PYTHONPATH=os.pathsep.join(site.getsitepackages())
  )
  # The short run needs no saved_model_cli: it starts warm; the verbose one from that bin/.
  runs = [
    subprocess.Popen(
      [*command, "-m", "serving.export.check", *extra, str(base)],
      stdout=subprocess.PIPE,
      stderr=subprocess.PIPE,
      text=True,
      cwd=REPO,
      env=env,
    )
    for command, extra, env in (
      (warm_start.python(), [], warm_start.environment()),
      ([str(python)], ["--verbose"], no_scripts),
    )
  ]
  (short, short_err), (verbose, verbose_err) = [run.communicate(timeout=300) for run in runs]
  assert [run.returncode for run in runs] == [0, 0], short_err[-2000:] + verbose_err[-2000:]
  version_dirs = [os.path.join(base, v) for v in sorted(os.listdir(base), key=int, reverse=True)]
  assert short.splitlines() == [check.summary_line(d) for d in version_dirs]
  for line in short.splitlines():
    assert line.startswith("OK ") and "serving_default" in line and "XLA: none" in line
  assert "signature_def['serving_default']" in verbose
  assert "signature_def['attention']" in verbose  # listed for REST clients to find
  assert (
    "  translate_nbest(text: string [None]) -> log_prob: float32 [None, 4], "
    "score: float32 [None, 4], translation: string [None, 4]\n"
  ) in verbose
  assert verbose.splitlines()[-1] == short.splitlines()[-1]


# --- Decode options, n-best and sampling, end to end ----------------------------------------

SAMPLING = DecodeOptions(
  strategy="sample", beam_size=3, temperature=0.8, top_k=8, top_p=0.95, seed=7
)


def _serve(base, name="numbers"):
  """(client, stop) of an in-process REST server for the versions under `base`."""
  manager = ModelManager(name, str(base), poll_seconds=0.2)
  manager.start()
  server = make_server(manager, "127.0.0.1", 0, None, 1 << 20)
  threading.Thread(target=server.serve_forever, daemon=True).start()
  client = ServingClient(name, port=server.server_address[1])
  client.wait_until_available()
  return client, lambda: (server.shutdown(), manager.stop())


def _run_configured(trained_run, directory, run_config):
  """A copy of `trained_run` whose run_config.json holds `run_config`."""
  shutil.copytree(trained_run, directory)
  (directory / "run_config.json").write_text(json.dumps(run_config))
  return directory


def _export_info(path):
  with open(os.path.join(path, export.EXPORT_INFO_FILE)) as f:
    return json.load(f)


def test_an_export_decodes_as_its_run_evaluated_unless_told_otherwise(
  trained_run, sampling_exports, tmp_path
):
  path = os.path.join(sampling_exports["graph"], "1")  # exported without options
  info = _export_info(path)
  assert info["decode_options"] == SAMPLING.to_dict()
  assert info["signatures"] == [
    "attention",
    "encode",
    "sample",
    "score",
    "serving_default",
    "translate_ids",
    "translate_nbest",
  ]
  assert (
    "sample(seed: int64 [None], text: string [None]) -> log_prob: float32 [None], "
    "score: float32 [None], translation: string [None]"
  ) in check.signature_lines(path)
  # A run saved before DecodeOptions: its eval_beam_size and eval_alpha.
  old_run = _run_configured(trained_run, tmp_path / "old", {"eval_beam_size": 4, "eval_alpha": 0.8})
  assert export.run_decode_options(str(old_run)) == DecodeOptions(beam_size=4, alpha=0.8)


def test_export_flags_override_the_runs_options_one_by_one(trained_run, tmp_path):
  run_dir = _run_configured(trained_run, tmp_path / "run", {"eval_beam_size": 4, "eval_alpha": 0.8})
  command = [*warm_start.python(), "-m", "serving.export", f"--run_dir={run_dir}"]
  flags = {  # (the XLA export also prints the server flag it needs)
    "exported": [
      *("--decode_strategy=sample", "--top_k=3", "--sample_seed=5", "--decode=xla"),
      *("--warmup_text=ein Satz", "--warmup_text=12"),
    ],
    "refused": ["--top_p=1.5"],
  }
  processes = {
    name: subprocess.Popen(  # side by side: each mostly waits for its own core
      [*command, f"--base_path={tmp_path / name}", *more],
      stdout=subprocess.PIPE,
      stderr=subprocess.PIPE,
      text=True,
      cwd=REPO,
      env=warm_start.environment(),
    )
    for name, more in flags.items()
  }
  outputs = {name: process.communicate(timeout=300) for name, process in processes.items()}
  results = {name: (processes[name].returncode, err) for name, (_, err) in outputs.items()}
  assert results["exported"][0] == 0, results["exported"][1][-3000:]
  assert outputs["exported"][0].splitlines()[-1] == (
    "XLA export: TF Serving CPU images (any version) need --xla_cpu_compilation_enabled=true, "
    "GPU images >= 2.18 need --xla_gpu_compilation_enabled=true, GPU images <= 2.17 cannot "
    "serve it (serving.server too)"
  )
  assert (
    _export_info(tmp_path / "exported" / "1")["decode_options"]
    == DecodeOptions(strategy="sample", beam_size=4, alpha=0.8, top_k=3, seed=5).to_dict()
  )
  warmed = warmup.read_warmup_file(str(tmp_path / "exported" / "1" / warmup.WARMUP_FILE))
  texts = [t for _, inputs in warmed if "text" in inputs for t in np.ravel(inputs["text"])]
  assert {b"ein Satz", b"12"} <= set(texts), texts  # --warmup_text: the first requests
  assert results["refused"][0] == 2, results["refused"][1][-3000:]
  assert results["refused"][1].strip().endswith("--top_p must be in (0, 1], got 1.5")
  assert not os.path.exists(tmp_path / "refused")


def test_translate_nbest_over_rest(exported):
  """A greedy export (beam_size 4 in its options) answers every beam of a beam search."""
  base, path = exported
  client, stop = _serve(base)
  try:
    rows = client.predict(instances=["12", "345"], signature_name="translate_nbest")
    columns = client.predict(inputs={"text": ["12", "345"]}, signature_name="translate_nbest")
    best = client.predict(instances=["12", "345"])["predictions"]
  finally:
    stop()
  rows = rows["predictions"]
  assert [len(row["translation"]) for row in rows] == [4, 4]
  assert columns["outputs"]["translation"] == [row["translation"] for row in rows]
  for row in rows:
    assert len(set(row["translation"])) == 4 or len(set(row["score"])) == 4  # distinct beams
    assert row["score"] == sorted(row["score"], reverse=True)
    assert all(score >= log_prob for score, log_prob in zip(row["score"], row["log_prob"]))
  assert [set(row) for row in best] == [{"translation", "score", "log_prob"}] * 2
  loaded = tf.saved_model.load(path).signatures["translate_nbest"](text=tf.constant(["12"]))
  np.testing.assert_allclose(loaded["score"][0], rows[0]["score"], atol=1e-4)


@pytest.fixture(scope="module")
def sampling_exports(trained_run, tmp_path_factory):
  """{decode mode: base path} of the same weights exported to sample, in graph and XLA mode.
  The graph export is of a copy of the run whose saved configuration decodes with SAMPLING,
  exported without options: it decodes as its run evaluated (the test of that reads it)."""
  base = tmp_path_factory.mktemp("sampling")
  run_dir = _run_configured(trained_run, base / "run", {"decode": SAMPLING.to_dict()})
  return {
    "graph": os.path.dirname(export.export(str(run_dir), str(base / "graph"))),
    "xla": os.path.dirname(
      export.export(str(trained_run), str(base / "xla"), options=SAMPLING, decode="xla")
    ),
  }


def _sample(client, texts, seeds):
  instances = [{"text": text, "seed": seed} for text, seed in zip(texts, seeds)]
  return client.predict(instances=instances, signature_name="sample")["predictions"]


def test_sampling_exports_answer_reproducibly_over_rest_in_graph_and_xla_mode(sampling_exports):
  answers = {}
  for mode, base in sampling_exports.items():
    client, stop = _serve(base)
    try:
      answers[mode] = {
        "sample": _sample(client, ["12", "345", "12"], [1, 2, 3]),
        "again": _sample(client, ["12", "345", "12"], [1, 2, 3]),
        "alone": _sample(client, ["345"], [2]),
        "seeds": _sample(client, ["4213"] * 3, [0, 1, 2]),
        "default": client.predict(instances=["12", "345", "4"])["predictions"],
        "default_mates": client.predict(instances=["7", "345", "12"])["predictions"],
        "nbest": client.predict(instances=["12"], signature_name="translate_nbest"),
      }
    finally:
      stop()
  for mode, answer in answers.items():
    sample = answer["sample"]
    assert [set(row) for row in sample] == [{"translation", "score", "log_prob"}] * 3
    assert answer["again"] == sample  # the same text and seed: the same answer
    assert answer["alone"][0]["translation"] == sample[1]["translation"]  # whatever the mates
    assert answer["alone"][0]["log_prob"] == pytest.approx(sample[1]["log_prob"], abs=1e-4)
    assert len({row["translation"] for row in answer["seeds"]}) > 1, mode  # seeds matter
    # serving_default samples with seeds of the text itself: batch-mates change nothing.
    default, mates = answer["default"], answer["default_mates"]
    assert [mates[2]["translation"], mates[1]["translation"]] == [
      row["translation"] for row in default[:2]
    ]
    nbest = answer["nbest"]["predictions"][0]
    assert len(nbest["translation"]) == 3 and nbest["score"] == sorted(nbest["score"], reverse=True)
  graph, xla = answers["graph"], answers["xla"]
  for name in ("sample", "seeds", "default", "default_mates"):
    assert_same_answers_but_a_near_tie(
      [(row["translation"], row["score"]) for row in xla[name]],
      [(row["translation"], row["score"]) for row in graph[name]],
    )
  nbest_xla, nbest_graph = (a["nbest"]["predictions"][0] for a in (xla, graph))
  assert_same_answers_but_a_near_tie(
    list(zip(nbest_xla["translation"], nbest_xla["score"])),
    list(zip(nbest_graph["translation"], nbest_graph["score"])),
  )


def test_a_sampling_xla_export_warms_up_both_of_its_searches(sampling_exports):
  path = os.path.join(sampling_exports["xla"], "1")
  info = _export_info(path)
  compiled = {}
  for signature, inputs in warmup.read_warmup_file(os.path.join(path, warmup.WARMUP_FILE)):
    compiled.setdefault(signature, []).append(len(inputs["text"]))
  # The generic requests, then one per bucket (16, 24) and search: `sample` shares
  # serving_default's compiled search, translate_nbest has its own.
  assert compiled == {"serving_default": [2, 1, 1], "translate_nbest": [2, 1, 1], "sample": [2]}
  assert info["length_buckets"] == [16, 24] and info["decode"] == "xla"
  assert len(check.must_compile_functions(path)) >= 2


@pytest.mark.parametrize(
  "metrics, expected",
  [
    ({"step": 6, "weights": {"checkpoints": ["ckpt-4", "ckpt-6"], "chosen_by": "x"}}, ["4", "6"]),
    # Written by runs finished before eval.json named its weights (fda25e5): an averaging run
    # listed what it averaged, and the export must serve that mean, not the last checkpoint.
    ({"step": 6, "averaged_checkpoints": ["ckpt-2", "ckpt-4", "ckpt-6"]}, ["2", "4", "6"]),
    ({"step": 6, "bleu": 1.0}, None),  # judged its latest checkpoint
  ],
)
def test_final_weights_are_those_the_run_judged(tmp_path, metrics, expected):
  (tmp_path / "eval.json").write_text(json.dumps(metrics))
  found = export.final_weights(str(tmp_path))
  if expected is None:
    assert found is None
  else:
    assert found == [str(tmp_path / "checkpoints" / f"ckpt-{n}") for n in expected]
  assert export.final_weights(str(tmp_path / "unfinished")) is None


def test_the_sample_signature_keeps_tokens_tied_at_the_nucleus_edge(tmp_path):
  """Issue 33: with a top-k cut, the export's `sample` drew only the lower id of two tokens
  tied at the top-p edge. A language model export, one token per prompt: its embedding is set so
  that the first token's logits are 12 for x and 11.3 for y and z (equal rows: an exact tie),
  and top_p ends inside y. numpy's distribution over {x, y, z} is the reference."""
  from serving.export.modules import LanguageModelExport
  from tfattn import masking
  from tfattn import text as tfattn_text
  from tfattn.language_model import LanguageModel
  from train import tokenizer as vocabulary

  words = tf.data.Dataset.from_tensor_slices(["red green blue cat dog fish sun moon"] * 20)
  path = vocabulary.learn_and_write(vocabulary.SENTENCEPIECE, words, 40, str(tmp_path / "vocab"))
  tok = tfattn_text.load_tokenizer(path)
  config = tfattn.TransformerConfig.preset(
    "tiny", source_vocab_size=tok.vocab_size, target_vocab_size=tok.vocab_size, max_length=16
  )
  model = LanguageModel(config)
  texts = [
    tok.detokenize(tf.constant([[i]]))[0].numpy().decode().strip() for i in range(4, tok.vocab_size)
  ]
  ids = [i + 4 for i, piece in enumerate(texts) if piece and texts.count(piece) == 1]
  x, y, z = ids[:3]
  start = tf.constant([[config.bos_id]])
  states, _ = model.decoder(start, tf.zeros_like(start), masking.causal_bias(1))
  h = states[0, -1]  # what the first step's logits read
  direction = h / tf.reduce_sum(h * h)
  table = model.decoder.embedding.table
  for token, logit in ((x, 12.0), (y, 11.3), (z, 11.3)):
    table[token].assign(logit * direction)
  logits = model(start)[0, -1].numpy().astype(np.float64)
  assert logits[y] == logits[z]
  probs = np.exp(logits - logits.max())
  kept = np.argsort(-probs, kind="stable")[:4]
  assert set(kept[:3]) == {x, y, z}
  top = probs[kept] / probs[kept].sum()
  options = DecodeOptions(strategy="sample", top_k=4, top_p=float(top[0] + top[1] / 2))
  expected = np.array([probs[x], probs[y], probs[z]]) / (probs[x] + 2 * probs[y])
  module = LanguageModelExport(model, tok, options.replace(max_decode_length=1))
  rows = 900
  drawn = module.sample(tf.constant([""] * rows), tf.range(rows, dtype=tf.int64))["generation"]
  counts = collections.Counter(t.decode().strip() for t in drawn.numpy())
  observed = np.array([counts[texts[t - 4]] for t in (x, y, z)])
  assert observed.sum() == rows, counts
  statistic = ((observed - expected * rows) ** 2 / (expected * rows)).sum()
  assert float(tf.math.igammac(1.0, statistic / 2.0)) > 1e-3, (observed, expected * rows)


def _trained_model(run_dir):
  """The Transformer of a run directory with its latest checkpoint's weights."""
  config = tfattn.TransformerConfig.from_json((run_dir / "model_config.json").read_text())
  model = tfattn.Transformer(config)
  tf.train.Checkpoint(model=model).read(
    tf.train.latest_checkpoint(str(run_dir / "checkpoints"))
  ).expect_partial()
  return model


def test_score_is_the_models_teacher_forced_log_probability(trained_run, exported):
  """score(source_ids, target_ids) = sum over target tokens of log p(token | source, the tokens
  before it), padding excluded: the model's own teacher-forced softmax, computed here."""
  model = _trained_model(trained_run)
  source = tf.constant([[5, 6, 7, 0], [8, 9, 10, 11]], tf.int32)
  target = tf.constant([[12, 9, 30, 2, 0], [4, 2, 0, 0, 0]], tf.int32)  # END = 2, then padding
  scored = (
    _load(exported[1]).signatures["score"](source_ids=source, target_ids=target)["log_prob"].numpy()
  )
  decoder_input = tf.concat([tf.fill([2, 1], model.config.bos_id), target[:, :-1]], axis=1)
  log_probs = tf.nn.log_softmax(model(source, decoder_input)).numpy()
  expected = [
    sum(log_probs[row, i, token] for i, token in enumerate(target[row].numpy()) if token != 0)
    for row in range(2)
  ]
  np.testing.assert_allclose(scored, expected, rtol=1e-5, atol=1e-4)


def test_evaluation_decodes_what_the_export_serves(
  trained_run, exported, graph_and_xla_exports, sampling_exports
):
  """docs/training.md: "Evaluation decodes exactly as the export will serve". The decoder the
  evaluation runs (`train.evaluation.make_decoder`, on batches of its own pipeline) and the
  export's serving_default (from text) give the same outputs, greedy, beam and sampling (each
  row with the seed the export gives its text, whatever its batch-mates)."""
  from tfattn import text as tfattn_text
  from train import data, evaluation

  model = _trained_model(trained_run)
  config = model.config
  source, target = (
    tfattn_text.load_tokenizer(tfattn_text.tokenizer_path(str(trained_run / "vocab"), side))
    for side in ("source", "target")
  )
  texts = ["12", "345", "7", "9081", "66", "1234567", "5"]
  # (text, text) pairs: the batches' "target_text" gives back each row's source text.
  raw = tf.data.Dataset.from_tensor_slices((texts, texts))
  batches = list(data.seq2seq_dataset(raw, source, target, 3, config.max_length, keep_text=True))
  exports = {  # the module's own exports of trained_run: none made for this test alone
    "greedy": (GREEDY, os.path.dirname(exported[1])),
    "beam": (DecodeOptions(beam_size=4), os.path.dirname(graph_and_xla_exports[4][0])),
    "sample": (SAMPLING, sampling_exports["graph"]),
  }
  for name, (options, base) in exports.items():
    decode = evaluation.make_decoder(model, options)
    evaluated = {}
    for batch in batches:
      hypotheses = target.detokenize(decode(batch["source"])).numpy()
      evaluated.update(zip(batch["target_text"].numpy(), hypotheses))
    assert sorted(evaluated) == sorted(t.encode() for t in texts)
    served = tf.saved_model.load(os.path.join(base, "1")).signatures["serving_default"]
    answers = served(text=tf.constant(texts))["translation"].numpy()
    assert [evaluated[t.encode()] for t in texts] == list(answers), name
    assert len(set(answers)) > 1, (name, answers)  # outputs that tell texts apart
