"""`python -m serving.server` as TF Serving is run in production: several models from a
--model_config_file that it re-reads, gRPC and REST side by side, the Prometheus page of a
--monitoring_config_file, CORS headers; SIGTERM ends it with status 0."""

import json
import os
import re
import shutil
import subprocess
import time
import urllib.request

import pytest
from test_server_conformance import _half_plus_two

from serving.server import launch
from serving.tools.client import GrpcServingClient, ServingClient

import classifier_fixtures
import warm_start

# The session's classifier export (tests/classifier_fixtures.py), shared with the attention tests.
classifier_run = classifier_fixtures.classifier_run
classifier_exported = classifier_fixtures.classifier_exported

pytestmark = pytest.mark.slow  # runs the server in a subprocess

MODELS = """model_config_list {{
  config {{ name: "first" base_path: "{first}" model_platform: "tensorflow"
           model_version_policy {{ latest {{ num_versions: 2 }} }} {labels} }}
  {second}
}}"""
SECOND = 'config { name: "second" base_path: "%s" model_platform: "tensorflow" }'


def _write(path, text):
  """Replaces the file in one step, so the polling server never reads half of it."""
  with open(f"{path}.tmp", "w") as f:
    f.write(text)
  os.replace(f"{path}.tmp", path)


def _wait_for(condition, what, timeout=60):
  deadline = time.time() + timeout
  while not condition():
    assert time.time() < deadline, f"not seen in {timeout} s: {what}"
    time.sleep(0.2)


def _states(client):
  return [(s["version"], s["state"]) for s in client.status()["model_version_status"]]


def test_models_config_grpc_metrics_and_cors_in_one_server(tmp_path):
  first = _half_plus_two(tmp_path / "first")  # version 123
  shutil.copytree(first / "123", first / "124")
  second = _half_plus_two(tmp_path / "second")
  config = tmp_path / "models.config"
  _write(config, MODELS.format(first=first, second=SECOND % second, labels=""))
  (tmp_path / "monitoring.config").write_text('prometheus_config { enable: true path: "/metrics" }')
  process, ports = launch.start_subprocess(
    extra_flags=[
      f"--model_config_file={config}",
      "--model_config_file_poll_wait_seconds=0.5",
      f"--monitoring_config_file={tmp_path / 'monitoring.config'}",
      "--rest_api_enable_cors_support",
    ],
    python=warm_start.python(),
    env=warm_start.environment(),
  )
  try:
    rest = ServingClient("first", port=ports.rest)
    assert _states(rest) == [("124", "AVAILABLE"), ("123", "AVAILABLE")]  # num_versions: 2
    grpc_client = GrpcServingClient("second", port=ports.grpc)
    try:
      assert grpc_client.predict({"x": [1.0, 3.0]})["y"].tolist() == [2.5, 3.5]
    finally:
      grpc_client.close()
    request = urllib.request.Request(
      f"http://127.0.0.1:{ports.rest}/v1/models/first:predict",
      data=b'{"instances": [2.0]}',
      method="POST",
    )
    with urllib.request.urlopen(request, timeout=60) as response:
      assert json.loads(response.read()) == {"predictions": [3.0]}
      assert response.headers["Access-Control-Allow-Origin"] == "*"
      assert response.headers["Access-Control-Allow-Methods"] == "POST, GET"

    # The file changes: "second" leaves, "first" gets a label. The server notices by itself.
    _write(
      config,
      MODELS.format(first=first, second="", labels='version_labels { key: "stable" value: 123 }'),
    )
    _wait_for(
      lambda: _states(ServingClient("second", port=ports.rest)) == [("123", "END")],
      "second unloaded",
    )
    assert rest.predict(instances=[4.0], label="stable") == {"predictions": [4.0]}

    with urllib.request.urlopen(f"http://127.0.0.1:{ports.rest}/metrics", timeout=60) as page:
      text = page.read().decode()
    text = text.replace(":tensorflow:serving:", "")
    assert 'request_latency_count{API="Predict",entrypoint="GRPC",model_name="second"} 1.0' in text
    assert 'request_latency_count{API="predict",entrypoint="REST",model_name="first"} 2.0' in text
  finally:
    status = launch.stop(process)
  assert status == 0, process.log_tail()[-3000:]


def _readme_files():
  """{file name: text} of the config files docs/serving.md shows (`models/NAME.config`: a block)."""
  with open(os.path.join(launch.REPO_ROOT, "docs", "serving.md"), encoding="utf-8") as f:
    readme = f.read()
  return dict(
    re.findall(
      r"^`models/(\w+\.config)`[^\n]*\n(?:[^`\n][^\n]*\n)*?\n```\n(.*?)```",
      readme,
      re.MULTILINE | re.DOTALL,
    )
  )


def _client(*args):
  return subprocess.Popen(
    [*warm_start.python(), "-m", "serving.tools.client", *args],
    cwd=launch.REPO_ROOT,
    env=warm_start.environment(),
    stdout=subprocess.PIPE,
    stderr=subprocess.PIPE,
    text=True,
  )


def test_the_readmes_config_files_run_as_they_are(exported, classifier_exported, tmp_path):
  """docs/serving.md's models.config (two models, labels), batching.config and monitoring.config,
  with base paths on this machine; both protocols, both models; the metrics move with traffic;
  serving.tools.client prints the same over REST and gRPC."""
  files = _readme_files()
  assert set(files) == {"models.config", "batching.config", "monitoring.config"}
  models = tmp_path / "models"
  for version in ("1", "2"):
    shutil.copytree(exported[1], models / "tfattn" / version)
  shutil.copytree(classifier_exported[0], models / "imdb")
  for name, text in files.items():
    (models / name).write_text(text.replace('"/models/', f'"{models}/'))
  process, ports = launch.start_subprocess(
    extra_flags=[
      f"--model_config_file={models / 'models.config'}",
      "--allow_version_labels_for_unavailable_models=true",
      "--enable_batching",
      f"--batching_parameters_file={models / 'batching.config'}",
      f"--monitoring_config_file={models / 'monitoring.config'}",
    ],
    python=warm_start.python(),
    env=warm_start.environment(),
  )
  try:
    page = f"http://127.0.0.1:{ports.rest}/monitoring/prometheus/metrics"
    count = ':tensorflow:serving:request_count{model_name="tfattn",status="OK"} '

    def served_ok():
      with urllib.request.urlopen(page, timeout=60) as response:
        text = response.read().decode()
      return float(text.split(count, 1)[1].split()[0]) if count in text else 0.0

    before = served_ok()
    canary = ServingClient("tfattn", port=ports.rest).predict(instances=["12"], label="canary")
    assert canary["predictions"][0]["translation"] is not None
    assert served_ok() == before + 1
    grpc_client = GrpcServingClient("imdb", port=ports.grpc)
    try:
      classified = grpc_client.predict({"text": ["a fine film"]})
    finally:
      grpc_client.close()
    assert classified["probabilities"].shape == (1, 3)
    every_beam = ["--model=tfattn", "--signature_name=translate_nbest", "--model_version=1"]
    clients = [
      _client(f"--port={ports.rest}", *every_beam, "--text=12", "--text=345"),
      _client("--protocol=grpc", f"--port={ports.grpc}", *every_beam, "--text=12", "--text=345"),
      _client(f"--port={ports.rest}", "--model=imdb", "--metadata"),
      _client("--protocol=grpc", f"--port={ports.grpc}", "--model=imdb", "--metadata"),
    ]
    outputs = [client.communicate(timeout=120) for client in clients]
    assert all(client.returncode == 0 for client in clients), outputs
    assert outputs[0][0] == outputs[1][0]
    beams = json.loads(outputs[0][0])["predictions"][0]["translation"]
    assert isinstance(beams, list) and len(beams) == 4  # every beam of version 1, best first
    assert outputs[2][0] == outputs[3][0] and '"classify_ids"' in outputs[2][0]
  finally:
    status = launch.stop(process)
  assert status == 0, process.log_tail()[-3000:]
