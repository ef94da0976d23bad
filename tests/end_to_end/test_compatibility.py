"""Run directories and exports made before this version (tfattn at fda25e5: before the declared
RunConfig, DecodeOptions and the three data roles; `tests/fixtures/fda25e5`) still load, resume,
export and serve."""

import json
import os
import shutil
import subprocess
import threading

import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  registers the tokenizer ops

from serving import export
from serving.export import check
from serving.server.model_manager import ModelManager
from serving.server.rest_api import make_server
from serving.tools.client import ServingClient
from tfattn.decode_options import DecodeOptions
from train.run_config import RunConfig

import warm_start
from train_helpers import REPO, environment

FIXTURES = os.path.join(REPO, "tests", "fixtures", "fda25e5")
KINDS = ("seq2seq", "classification")


@pytest.fixture
def old_runs(tmp_path):
  """The old run directories copied to `tmp_path`, their saved paths pointed there (as if the
  user's files had always lived there)."""
  runs = {}
  for kind in KINDS:
    run = tmp_path / f"run_{kind}"
    shutil.copytree(os.path.join(FIXTURES, f"run_{kind}"), run)
    shutil.copy(os.path.join(FIXTURES, f"{kind}.tsv"), tmp_path / f"{kind}.tsv")
    path = run / "run_config.json"
    saved = json.loads(path.read_text())
    saved.update(
      run_dir=str(run),
      train_file=str(tmp_path / f"{kind}.tsv"),
      export_base_path=str(tmp_path / f"export_{kind}"),
    )
    path.write_text(json.dumps(saved))
    runs[kind] = run
  return runs


def test_old_run_configurations_load_with_what_they_evaluated():
  for kind in KINDS:
    config = RunConfig.load(os.path.join(FIXTURES, f"run_{kind}", "run_config.json"))
    # eval_beam_size 1: evaluated greedily, so that is what its export serves by default.
    assert config.decode_options() == DecodeOptions(strategy="greedy")
    assert config.data.validation_file is None and config.data.test_file is None
    config.check(kind=kind)


@pytest.mark.slow
def test_old_runs_resume_and_export(old_runs, tmp_path):
  processes = [
    subprocess.Popen(
      [*warm_start.python(), "-m", "train", f"--run_dir={run}", "--train_steps=40"],
      cwd=REPO,
      env=environment(),
      stdout=subprocess.PIPE,
      stderr=subprocess.STDOUT,
      text=True,
    )
    for run in old_runs.values()
  ]
  outputs = [process.communicate(timeout=300)[0] for process in processes]
  for process, output in zip(processes, outputs):
    assert process.returncode == 0, output[-3000:]
    assert "resumed from" in output and "at step 30" in output, output[-3000:]
  for kind, run in old_runs.items():
    with open(run / "eval.json") as f:
      result = json.load(f)
    assert result["step"] == 40 and result["weights"]["checkpoints"] == ["ckpt-40"]
    assert result["validation"]["examples"] == 16
    # The export that training started (--export_base_path was saved) serves the new weights.
    version = tmp_path / f"export_{kind}" / "1"
    with open(version / "assets.extra" / "tfattn.json") as f:
      assert json.load(f)["checkpoints"] == ["ckpt-40"]
    model = tf.saved_model.load(str(version))
    answer = model.signatures["serving_default"](text=tf.constant(["1 2 3", "good"]))
    assert answer[{"seq2seq": "translation", "classification": "label"}[kind]].shape[0] == 2


@pytest.mark.slow
def test_old_exports_still_pass_the_check_and_serve_over_rest():
  for kind in KINDS:
    base = os.path.join(FIXTURES, f"export_{kind}")
    assert check.problems(os.path.join(base, "1")) == []
    manager = ModelManager("old", base, poll_seconds=0.2)
    manager.start()
    server = make_server(manager, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
      client = ServingClient("old", port=server.server_address[1])
      client.wait_until_available(timeout=120)
      predictions = client.predict(instances=["1 2 3", "great"])["predictions"]
      assert len(predictions) == 2
      key = {"seq2seq": "translation", "classification": "probabilities"}[kind]
      assert all(key in p for p in predictions)
    finally:
      server.shutdown()
      manager.stop()


@pytest.mark.slow
def test_old_run_exports_with_todays_exporter(old_runs, tmp_path):
  for kind, run in old_runs.items():
    path = export.export(str(run), str(tmp_path / f"new_{kind}"))
    model = tf.saved_model.load(path)
    answer = model.signatures["serving_default"](text=tf.constant(["4 5"]))
    assert answer[{"seq2seq": "translation", "classification": "label"}[kind]].shape[0] == 1
