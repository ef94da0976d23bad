"""`python -m serving.server` as TF Serving is run in production: several models from a
--model_config_file that it re-reads, gRPC and REST side by side, the Prometheus page of a
--monitoring_config_file, CORS headers; SIGTERM ends it with status 0."""

import json
import os
import shutil
import time
import urllib.request

import pytest
from test_server_conformance import _half_plus_two

from serving import launch
from serving.client import GrpcServingClient, ServingClient

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
  (tmp_path / "monitoring.config").write_text(
      'prometheus_config { enable: true path: "/metrics" }')
  process, ports = launch.start_subprocess(extra_flags=[
      f"--model_config_file={config}", "--model_config_file_poll_wait_seconds=0.5",
      f"--monitoring_config_file={tmp_path / 'monitoring.config'}",
      "--rest_api_enable_cors_support"])
  try:
    rest = ServingClient("first", port=ports.rest)
    assert _states(rest) == [("124", "AVAILABLE"), ("123", "AVAILABLE")]  # num_versions: 2
    grpc_client = GrpcServingClient("second", port=ports.grpc)
    try:
      assert grpc_client.predict({"x": [1.0, 3.0]})["y"].tolist() == [2.5, 3.5]
    finally:
      grpc_client.close()
    request = urllib.request.Request(f"http://127.0.0.1:{ports.rest}/v1/models/first:predict",
                                     data=b'{"instances": [2.0]}', method="POST")
    with urllib.request.urlopen(request, timeout=60) as response:
      assert json.loads(response.read()) == {"predictions": [3.0]}
      assert response.headers["Access-Control-Allow-Origin"] == "*"
      assert response.headers["Access-Control-Allow-Methods"] == "POST, GET"

    # The file changes: "second" leaves, "first" gets a label. The server notices by itself.
    _write(config, MODELS.format(first=first, second="",
                                 labels='version_labels { key: "stable" value: 123 }'))
    _wait_for(lambda: _states(ServingClient("second", port=ports.rest)) == [("123", "END")],
              "second unloaded")
    assert rest.predict(instances=[4.0], label="stable") == {"predictions": [4.0]}

    with urllib.request.urlopen(f"http://127.0.0.1:{ports.rest}/metrics", timeout=60) as page:
      text = page.read().decode()
    text = text.replace(":tensorflow:serving:", "")
    assert 'request_latency_count{API="Predict",entrypoint="GRPC",model_name="second"} 1.0' in text
    assert 'request_latency_count{API="predict",entrypoint="REST",model_name="first"} 2.0' in text
  finally:
    status = launch.stop(process)
  assert status == 0, process.log_tail()[-3000:]
