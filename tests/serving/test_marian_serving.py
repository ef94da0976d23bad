"""An imported Marian checkpoint (issue 50) through every serving command: exported (graph and
XLA), checked for TF Serving, served over REST and gRPC with text in and text out, and run by
serving.tools.predict, beam_predict, attention_maps and train.evaluate. The answer equals
transformers' tokenizer.batch_decode(model.generate(...)) for the committed fixture."""

import json
import os
import subprocess
import threading

import pytest

from serving import export
from serving.export import check
from serving.server import grpc_service
from serving.server.model_manager import ModelManager
from serving.server.rest_api import make_server
from serving.server.server_core import ServerCore
from serving.tools.client import GrpcServingClient, ServingClient
from train.import_marian import import_checkpoint

import warm_start
from train_helpers import REPO, environment

pytestmark = pytest.mark.slow

FIXTURES = os.path.join(REPO, "tests", "fixtures", "marian")


def _expected(name):
  with open(os.path.join(FIXTURES, name, "expected.json"), encoding="utf-8") as f:
    return json.load(f)


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
  """{name: (run dir, graph export base)} of two fixtures, imported and exported."""
  out = {}
  for name in ("shared", "multilingual"):
    folder = tmp_path_factory.mktemp(name)
    run_dir = str(folder / "run")
    import_checkpoint(os.path.join(FIXTURES, name), run_dir)
    export.export(run_dir, str(folder / "models"))
    out[name] = (run_dir, str(folder / "models"))
  return out


def _run(*args, timeout=300):
  result = subprocess.run(
    [*warm_start.python(), "-m", *args],
    cwd=REPO,
    env=environment(),
    capture_output=True,
    text=True,
    timeout=timeout,
  )
  assert result.returncode == 0, result.stderr[-3000:]
  return result


def test_the_exports_pass_the_tf_serving_check(imported):
  for _, base in imported.values():
    assert check.problems(os.path.join(base, "1")) == []


def test_rest_and_grpc_answer_what_transformers_generates(imported):
  managers = [ModelManager(name, base) for name, (_, base) in imported.items()]
  core = ServerCore(managers)
  core.start()
  grpc_server, ports = grpc_service.make_server(core, ["127.0.0.1:0"], 2, None)
  rest = make_server(core, "127.0.0.1", 0, timeout_seconds=120)
  threading.Thread(target=rest.serve_forever, daemon=True).start()
  try:
    for name in imported:
      expected = _expected(name)
      texts = expected["generate_texts"]
      client = ServingClient(name, port=rest.server_address[1])
      client.wait_until_available()
      answer = client.predict(instances=texts)["predictions"]
      assert [a["translation"] for a in answer] == expected["beam_mixed_text"]
      grpc_client = GrpcServingClient(name, port=ports["127.0.0.1:0"])
      try:
        outputs = grpc_client.predict({"text": texts})
      finally:
        grpc_client.close()
      got = [t.decode() for t in outputs["translation"]]
      assert got == expected["beam_mixed_text"]
  finally:
    rest.shutdown()
    grpc_server.stop(0).wait()
    core.stop()


def test_an_xla_export_answers_as_the_graph_one(imported, tmp_path):
  import tensorflow as tf

  run_dir, _ = imported["shared"]
  path = export.export(run_dir, str(tmp_path / "xla"), decode="xla")
  assert check.problems(path) == []
  expected = _expected("shared")
  loaded = tf.saved_model.load(path)
  answer = loaded.signatures["serving_default"](text=tf.constant(expected["generate_texts"]))
  assert [t.decode() for t in answer["translation"].numpy()] == expected["beam_mixed_text"]


def test_the_file_commands_and_the_evaluation_take_an_import(imported, tmp_path):
  run_dir, base = imported["shared"]
  expected = _expected("shared")
  texts = expected["generate_texts"]
  source = tmp_path / "input.txt"
  source.write_text("".join(t.replace("\n", " ") + "\n" for t in texts), encoding="utf-8")
  single = [t for t in texts if "\n" not in t and "\t" not in t]
  assert len(single) == len(texts)  # the chosen texts are one line each
  _run(
    "serving.tools.predict",
    f"--model={base}",
    f"--input={source}",
    f"--output={tmp_path / 'out.txt'}",
  )
  assert (tmp_path / "out.txt").read_text(encoding="utf-8").split("\n")[:-1] == expected[
    "beam_mixed_text"
  ]
  _run(
    "serving.tools.beam_predict",
    f"--model={base}",
    f"--input={source}",
    f"--output={tmp_path / 'beam.txt'}",
  )
  assert (tmp_path / "beam.txt").read_text(encoding="utf-8") == (tmp_path / "out.txt").read_text(
    encoding="utf-8"
  )
  _run(
    "serving.tools.attention_maps",
    f"--model_base_path={base}",
    "--text=the quick fox",
    f"--out={tmp_path / 'map.png'}",
  )
  assert (tmp_path / "map.png").stat().st_size > 1000
  pairs = tmp_path / "pairs.tsv"
  pairs.write_text(
    "".join(f"{s}\t{t}\n" for s, t in zip(texts, expected["beam_mixed_text"]) if s.strip()),
    encoding="utf-8",
  )
  _run(
    "train.evaluate", f"--run_dir={run_dir}", f"--file={pairs}", f"--output={tmp_path / 'e.json'}"
  )
  metrics = json.loads((tmp_path / "e.json").read_text())
  assert metrics["metrics"]["exact_match"] == 1.0, metrics  # it judges what it serves
