"""Prometheus metrics under TF Serving's names, and its `--monitoring_config_file`.

Metrics (servables/tensorflow/util.cc, saved_model_warmup_util.cc; TF Serving's exporter turns
the `/` of `/tensorflow/serving/request_count` into `:`):
  :tensorflow:serving:request_count{model_name, status}            every request, by its code
  :tensorflow:serving:request_latency{model_name, API, entrypoint}  successful requests, us
  :tensorflow:serving:runtime_latency{model_name, API, runtime}     the model's run, us
  :tensorflow:serving:model_warmup_latency{model_path, status}      a version's warm-up, us
  :tensorflow:serving:model_warmup_records_read{model_path, status}
Histograms use TF Serving's buckets (10 us x 1.8^i, 33 of them). The page is prometheus_client's
text exposition of a registry of our own, served on the REST port at the config's path.

`request_count` and `model_warmup_records_read` are TF Serving counters whose samples carry no
`_total` suffix; prometheus_client would append one to a counter (breaking queries written for
TF Serving), so they are exported as untyped metrics with TF Serving's exact sample names.
The config file's MonitoringConfig message is declared in serving.server.config_protos.
"""

import collections
import threading

import prometheus_client

from serving.server import config_protos

DEFAULT_PATH = "/monitoring/prometheus/metrics"  # PrometheusExporter::kPrometheusPath
# Buckets::Exponential(10, 1.8, 33), microseconds, printed with 6 significant digits as
# TF Serving's exporter prints them.
LATENCY_BUCKETS = tuple(float(f"{10 * 1.8**i:.6g}") for i in range(33))


def read_config(path):
  """The Prometheus page's path from a --monitoring_config_file, or None when not enabled.
  Raises ValueError naming the problem."""
  try:
    with open(path, encoding="utf-8") as f:
      text = f.read()
  except (OSError, UnicodeDecodeError) as error:
    raise ValueError(f"cannot read {path}: {getattr(error, 'strerror', None) or error}") from None
  prometheus = config_protos.parse(text, config_protos.MonitoringConfig).prometheus_config
  if not prometheus.enable:
    return None
  path = prometheus.path or DEFAULT_PATH
  if not path.startswith("/"):
    raise ValueError(f"prometheus_config path must start with /, got {path!r}")
  return path


class _ExactCounters:
  """prometheus_client collector for counters exported under TF Serving's sample names."""

  def __init__(self):
    self._values = collections.defaultdict(collections.Counter)  # name -> labels -> count
    self._docs, self._label_names = {}, {}
    self._lock = threading.Lock()

  def declare(self, name, documentation, label_names):
    self._docs[name], self._label_names[name] = documentation, tuple(label_names)

  def increment(self, name, label_values, amount=1):
    with self._lock:
      self._values[name][tuple(label_values)] += amount

  def collect(self):
    with self._lock:
      snapshot = {name: dict(values) for name, values in self._values.items()}
    for name, documentation in self._docs.items():
      metric = prometheus_client.Metric(name, documentation, "unknown")
      for label_values, count in sorted(snapshot.get(name, {}).items()):
        metric.add_sample(name, dict(zip(self._label_names[name], label_values)), count)
      yield metric


class Metrics:
  """The server's metrics in a registry of its own (no process or platform collectors)."""

  REQUEST_COUNT = ":tensorflow:serving:request_count"
  WARMUP_RECORDS = ":tensorflow:serving:model_warmup_records_read"

  def __init__(self):
    # TF Serving's page has no `_created` series; prometheus_client adds them unless told.
    prometheus_client.disable_created_metrics()
    self.registry = prometheus_client.CollectorRegistry(auto_describe=True)
    self._counters = _ExactCounters()
    self._counters.declare(
      self.REQUEST_COUNT, "The total number of requests.", ("model_name", "status")
    )
    self._counters.declare(
      self.WARMUP_RECORDS,
      "Total number of warmup records read during model warmup.",
      ("model_path", "status"),
    )
    self.registry.register(self._counters)

    def histogram(name, documentation, labels):
      return prometheus_client.Histogram(
        name, documentation, labels, registry=self.registry, buckets=LATENCY_BUCKETS
      )

    self._request_latency = histogram(
      ":tensorflow:serving:request_latency",
      "Distribution of wall time (in microseconds) for Tensorflow Serving request.",
      ("model_name", "API", "entrypoint"),
    )
    self._runtime_latency = histogram(
      ":tensorflow:serving:runtime_latency",
      "Distribution of wall time (in microseconds) for Tensorflow runtime.",
      ("model_name", "API", "runtime"),
    )
    self._warmup_latency = histogram(
      ":tensorflow:serving:model_warmup_latency",
      "Distribution of wall time (in microseconds) for warming up the model.",
      ("model_path", "status"),
    )

  def record_request(self, model_name, api, entrypoint, code, seconds):
    """One finished request (http_server.cc / prediction_service_impl.cc): counted by its
    canonical code; its latency recorded only when it succeeded."""
    self._counters.increment(self.REQUEST_COUNT, (model_name, code))
    if code == "OK":
      self._request_latency.labels(model_name, api, entrypoint).observe(seconds * 1e6)

  def record_runtime(self, model_name, api, seconds):
    # "TF1": the model runs in a Session, TF Serving's runtime label for SavedModelBundle.
    self._runtime_latency.labels(model_name, api, "TF1").observe(seconds * 1e6)

  def record_warmup(self, model_path, code, records, seconds):
    self._counters.increment(self.WARMUP_RECORDS, (model_path, code), records)
    self._warmup_latency.labels(model_path, code).observe(seconds * 1e6)

  def page(self):
    """(content type, body bytes) of the Prometheus text page."""
    return prometheus_client.CONTENT_TYPE_PLAIN_0_0_4, prometheus_client.generate_latest(
      self.registry
    )
