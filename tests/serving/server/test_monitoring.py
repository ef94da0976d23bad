"""serving.server.monitoring: --monitoring_config_file, and the Prometheus page a server built from
real requests (REST and gRPC on one ServerCore) exposes under TF Serving's metric names. The
page is read back with prometheus_client's own parser, so it is valid exposition text."""

import threading
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families
from test_server_conformance import _half_plus_two

from serving.server import grpc_service, monitoring
from serving.server.model_manager import ModelManager
from serving.server.rest_api import make_server
from serving.server.server_core import ServerCore
from serving.tools.client import GrpcServingClient, ServingClient, ServingError

NAME = "numbers"


@pytest.mark.parametrize(
  "text,path",
  [
    ("prometheus_config { enable: true }", "/monitoring/prometheus/metrics"),
    ('prometheus_config { enable: true path: "/metrics" }', "/metrics"),
    ('prometheus_config { enable: false path: "/metrics" }', None),
    ("", None),
  ],
)
def test_monitoring_config_file(tmp_path, text, path):
  config = tmp_path / "monitoring.config"
  config.write_text(text)
  assert monitoring.read_config(str(config)) == path


@pytest.mark.parametrize(
  "text,message",
  [
    ("prometheus_config { enabled: true }", 'has no field named "enabled"'),
    ('prometheus_config { enable: true path: "metrics" }', "must start with /"),
    ("prometheus_config { enable: 7 }", "not a text MonitoringConfig"),
  ],
)
def test_monitoring_config_mistakes(tmp_path, text, message):
  config = tmp_path / "monitoring.config"
  config.write_text(text)
  with pytest.raises(ValueError, match=message):
    monitoring.read_config(str(config))


def _families(port, path):
  with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=60) as response:
    content_type, text = response.headers["Content-Type"], response.read().decode()
  return content_type, {f.name: f for f in text_string_to_metric_families(text)}


def _value(families, name, sample_name, **labels):
  return next(
    (
      s.value
      for s in families[name].samples
      if s.name == sample_name and labels.items() <= s.labels.items()
    ),
    None,
  )


def test_the_page_counts_rest_and_grpc_requests_under_tf_servings_names(exported, tmp_path):
  base, version_path = exported
  metrics = monitoring.Metrics()
  core = ServerCore(
    [ModelManager(NAME, str(base)), ModelManager("half_plus_two", str(_half_plus_two(tmp_path)))],
    metrics=metrics,
  )
  core.start()
  rest = make_server(core, "127.0.0.1", 0, metrics=metrics, metrics_path="/metrics")
  threading.Thread(target=rest.serve_forever, daemon=True).start()
  grpc_server, ports = grpc_service.make_server(core, ["127.0.0.1:0"], 2, metrics)
  grpc_client = GrpcServingClient("half_plus_two", port=ports["127.0.0.1:0"])
  try:
    rest_client = ServingClient(NAME, port=rest.server_address[1])
    rest_client.predict(instances=["12"])
    rest_client.status()
    with pytest.raises(ServingError):
      rest_client.predict(instances=[1])
    grpc_client.predict({"x": [1.0, 2.0]})
    content_type, families = _families(rest.server_address[1], "/metrics")
  finally:
    grpc_client.close()
    rest.shutdown(0)
    grpc_server.stop(0).wait()
    core.stop()
  assert content_type.startswith("text/plain; version=0.0.4")
  count = ":tensorflow:serving:request_count"
  assert _value(families, count, count, model_name=NAME, status="OK") == 2  # predict, status
  assert _value(families, count, count, model_name=NAME, status="INVALID_ARGUMENT") == 1
  assert _value(families, count, count, model_name="half_plus_two", status="OK") == 1
  latency = ":tensorflow:serving:request_latency"
  assert families[latency].type == "histogram"
  assert (
    _value(families, latency, latency + "_count", model_name=NAME, API="predict", entrypoint="REST")
    == 1
  )  # successes only
  assert (
    _value(
      families,
      latency,
      latency + "_count",
      model_name="half_plus_two",
      API="Predict",
      entrypoint="GRPC",
    )
    == 1
  )
  assert _value(families, latency, latency + "_bucket", le="10.0") is not None  # TF's buckets
  runtime = ":tensorflow:serving:runtime_latency"
  assert (
    _value(families, runtime, runtime + "_count", model_name=NAME, API="Predict", runtime="TF1")
    == 1
  )  # the one predict that ran (not the warm-up, not the 400)
  warmup = ":tensorflow:serving:model_warmup_latency"
  assert _value(families, warmup, warmup + "_count", model_path=version_path, status="OK") == 1
  records = ":tensorflow:serving:model_warmup_records_read"
  assert _value(families, records, records, model_path=version_path, status="OK") >= 1
  assert not any(name.endswith("_created") for name in families)
