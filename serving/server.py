"""`python -m serving.server`: TensorFlow Serving's REST and gRPC APIs for machines without
`tensorflow_model_server`.

  GET  /v1/models/NAME[/versions/N|/labels/L]            status
  GET  /v1/models/NAME[/versions/N|/labels/L]/metadata   signature defs
  POST /v1/models/NAME[/versions/N|/labels/L]:predict    row or columnar predict
  gRPC tensorflow.serving.PredictionService / ModelService on --port (serving.grpc_service)
  GET  /monitoring/prometheus/metrics                    with --monitoring_config_file

Flags mirror tensorflow_model_server's; the models come from --model_config_file or
--model_name/--model_base_path (one ServerCore behind both protocols). HTTP/1.1 (keep-alive,
chunked bodies, read timeouts, listen backlog) is waitress's; this module maps requests to TF
Serving's answers, always JSON. Binds 127.0.0.1 unless --rest_api_host/--grpc_host say otherwise.
"""

import cli

import dataclasses
import errno
import gzip
import http
import io
import json
import logging as std_logging
import os
import re
import signal
import socket
import threading
import time
import urllib.parse

import waitress
import waitress.channel
import waitress.task
import waitress.utilities
from absl import flags, logging

from serving.tensor_json import (
  RestError,
  error_body,
  format_predict_response,
  invalid,
  parse_json,
  parse_predict_request,
  signature_name_of,
)
from serving.versions import version_numbers

FLAGS = flags.FLAGS


def _define_flags():
  """The command line, defined only when run as a program: importing this module (the tests,
  serving.demo) defines no flags, so importers may use the same flag names."""
  flags.DEFINE_string(
    "model_name", "default", "Name the model is served under (ignored with --model_config_file)."
  )
  flags.DEFINE_string(
    "model_base_path",
    None,
    "Directory holding numeric version folders (<path>/<N>/saved_model.pb). "
    "Required unless --model_config_file is given.",
  )
  flags.DEFINE_string(
    "model_config_file",
    None,
    "A text ModelServerConfig (model_config_list { config { name base_path "
    "model_platform model_version_policy version_labels } }): serve these "
    "models instead of --model_name/--model_base_path.",
  )
  flags.DEFINE_float(
    "model_config_file_poll_wait_seconds",
    0,
    "Seconds between re-reads of --model_config_file (0: read once at start).",
    lower_bound=0,
  )
  flags.DEFINE_integer(
    "port", 8500, "gRPC port (0 picks a free one).", lower_bound=0, upper_bound=65535
  )
  flags.DEFINE_string(
    "grpc_host", "127.0.0.1", "Address the gRPC port binds: 0.0.0.0 serves every interface."
  )
  flags.DEFINE_string("grpc_socket_path", None, "Also serve gRPC on this UNIX socket.")
  flags.DEFINE_integer(
    "grpc_max_threads",
    4 * (os.cpu_count() or 1),
    "gRPC calls processed at once (TF Serving's default: 4 x CPUs).",
    lower_bound=1,
  )
  flags.DEFINE_integer(
    "grpc_max_message_bytes",
    64 * 1024 * 1024,
    "Largest gRPC request message in bytes (larger: RESOURCE_EXHAUSTED).",
    lower_bound=1,
    upper_bound=2**31 - 1,
  )
  flags.DEFINE_string(
    "grpc_channel_arguments",
    "",
    "gRPC server options, e.g. grpc.max_concurrent_streams=100 (comma-separated key=value).",
  )
  flags.DEFINE_integer(
    "rest_api_port", 8501, "REST port (0 picks a free one).", lower_bound=0, upper_bound=65535
  )
  flags.DEFINE_string(
    "rest_api_host",
    "127.0.0.1",
    "Address to bind: 127.0.0.1 serves this machine only, 0.0.0.0 every interface.",
  )
  flags.DEFINE_integer(
    "rest_api_num_threads",
    4 * (os.cpu_count() or 1),
    "Requests processed at once (TF Serving's default: 4 x CPUs).",
    lower_bound=1,
  )
  flags.DEFINE_integer(
    "rest_api_read_timeout_seconds",
    30,
    "Close a connection that sends nothing for this many seconds (a half-sent "
    "request or an idle keep-alive connection).",
    lower_bound=1,
  )
  flags.DEFINE_integer(
    "rest_api_timeout_in_ms",
    30000,
    "Stop a REST request's model run after this long: 504 (0: no limit).",
  )
  flags.DEFINE_bool(
    "rest_api_enable_cors_support",
    False,
    "Add Access-Control-Allow-* headers to every REST answer.",
  )
  flags.DEFINE_string(
    "monitoring_config_file",
    None,
    "A text MonitoringConfig: prometheus_config { enable: true path: ... } "
    "serves Prometheus metrics on the REST port (default path "
    "/monitoring/prometheus/metrics).",
  )
  flags.DEFINE_float(
    "file_system_poll_wait_seconds",
    1.0,
    "Seconds between looks for new versions of each model (0: look once).",
    lower_bound=0,
  )
  flags.DEFINE_enum(
    "model_version_policy",
    "latest",
    ["latest", "all", "specific"],
    "Which versions to serve: the newest, all, or --versions.",
  )
  flags.DEFINE_list(
    "versions", [], "Versions served with --model_version_policy=specific, e.g. 1,2."
  )
  flags.DEFINE_string(
    "version_labels",
    "",
    "Labels for /labels/L URLs, e.g. stable=1,canary=2; each must name a "
    "served version (see --allow_version_labels_for_unavailable_models).",
  )
  flags.DEFINE_bool(
    "allow_version_labels_for_unavailable_models",
    False,
    "Accept labels naming versions that are not served (TF Serving's flag); "
    "requests for such a label answer 404 until the version is served.",
  )
  flags.DEFINE_bool("enable_batching", False, "Merge concurrent requests into batches.")
  flags.DEFINE_string(
    "batching_parameters_file",
    None,
    "TF Serving batching parameters (text proto), used with --enable_batching.",
  )
  flags.DEFINE_integer(
    "max_body_bytes",
    64 * 1024 * 1024,
    "Largest accepted REST request body in bytes (larger: 413).",
    lower_bound=1,
  )
  flags.DEFINE_string(
    "port_file",
    None,
    'Once serving, write the bound ports here as JSON: {"rest_api_port": N, "port": M}.',
  )
  flags.DEFINE_float(
    "shutdown_grace_seconds",
    10.0,
    "On SIGTERM/SIGINT, stop accepting and let requests in flight finish for up to this long.",
    lower_bound=0,
  )


# TF Serving's patterns (http_rest_api_util.cc): case-insensitive, ASCII digits only.
_API_PATH = re.compile(r"/v1/.*", re.IGNORECASE | re.DOTALL)
_PREDICT_PATH = re.compile(
  r"/v1/models/([^/:]+)(?:(?:/versions/(\d+))|(?:/labels/([^/:]+)))?"
  r":(classify|regress|predict)",
  re.IGNORECASE | re.ASCII,
)
_STATUS_PATH = re.compile(
  r"/v1/models(?:/([^/:]+))?(?:(?:/versions/(\d+))|(?:/labels/([^/:]+)))?(?:/(metadata))?",
  re.IGNORECASE | re.ASCII,
)
_INT64_MAX = 2**63 - 1
_MAX_DECOMPRESSED = 4  # gzip bodies may expand to this many times the body-size cap
_CORS_ORIGIN = re.compile(r"https?://")
_CORS_HEADERS = [
  ("Access-Control-Allow-Origin", "*"),  # http_rest_api_util.cc AddCORSHeaders
  ("Access-Control-Allow-Methods", "POST, GET"),
  ("Access-Control-Allow-Headers", "Content-Type"),
]


@dataclasses.dataclass(frozen=True)
class Route:
  """What a request path names (ParseModelInfo)."""

  name: str
  version: int = None
  label: str = None
  verb: str = None  # "predict" etc. for POST; None for GET
  metadata: bool = False


def parse_route(method, path):
  """(method, raw path) -> Route, with TF Serving's errors for what does not parse."""
  if method == "POST":
    match = _PREDICT_PATH.fullmatch(path)
  elif method == "GET":
    match = _STATUS_PATH.fullmatch(path)
  else:
    match = None
  if match is None:
    raise invalid(f"Malformed request: {method} {path}")
  name, version, label, last = match.groups()
  if version is not None and int(version) > _INT64_MAX:
    raise invalid(f"Failed to convert version: {version} to numeric.")
  route = Route(
    urllib.parse.unquote(name or ""),
    int(version) if version else None,
    urllib.parse.unquote(label) if label else None,
    last if method == "POST" else None,
    method == "GET" and last is not None,
  )
  if method == "GET" and not route.name:
    raise invalid("Missing model name in request.")
  if method == "POST" and route.verb not in ("predict", "classify", "regress"):
    raise invalid(f"Malformed request: {method} {path}")  # TF Serving compares verbs exactly
  return route


class RestApp:
  """The WSGI application: one TF Serving REST request -> (HTTP status, JSON text), over the
  models of a ServerCore (shared with the gRPC service)."""

  def __init__(
    self,
    core,
    max_body_bytes=64 * 1024 * 1024,
    timeout_seconds=None,
    metrics=None,
    metrics_path=None,
    cors=False,
  ):
    self.core, self.max_body_bytes, self.timeout_seconds = core, max_body_bytes, timeout_seconds
    self.metrics, self.metrics_path, self.cors = metrics, metrics_path, cors

  def __call__(self, environ, start_response):
    started = time.perf_counter()
    request = {"model_name": "", "api": ""}  # what the path named, for the metrics
    content_type = "application/json"
    try:
      status, body = self.respond(environ, request)
      code = "OK"
    except RestError as error:
      status, body, code = error.http_status, error_body(error.message), error.code
    except Exception as error:  # a bug must still answer JSON, and the server keeps serving
      logging.exception("request failed")
      status, code = 500, "INTERNAL"
      body = error_body(f"{type(error).__name__}: {str(error)[:300]}")
    if isinstance(body, bytes):  # the metrics page
      data, content_type = body, request["content_type"]
    else:
      data = body.encode("utf-8")
      # Counted as http_server.cc counts: every request its handler answered (a body over
      # the cap never reaches TF Serving's handler).
      if self.metrics is not None and code != "PAYLOAD_TOO_LARGE":
        self.metrics.record_request(
          request["model_name"], request["api"], "REST", code, time.perf_counter() - started
        )
    headers = [("Content-Type", content_type), ("Content-Length", str(len(data)))]
    if self.cors:  # --rest_api_enable_cors_support: AddCORSHeaders
      headers += _CORS_HEADERS
    start_response(_status_line(status), headers)
    return [data]

  def respond(self, environ, request=None):
    request = {} if request is None else request
    method = environ["REQUEST_METHOD"]
    path = _raw_path(environ)
    body = self._read_body(environ)  # read for every method, so keep-alive stays in step
    if self.metrics_path is not None and path == self.metrics_path:
      request["content_type"], page = self.metrics.page()
      return 200, page
    if not _API_PATH.fullmatch(path):
      raise RestError("NOT_FOUND", f"Not found: {path} (the REST API is under /v1/)")
    if method == "OPTIONS":  # CORS preflight, as TF Serving's dispatcher answers it
      if not _CORS_ORIGIN.search(environ.get("HTTP_ORIGIN", "")):
        raise RestError("FAILED_PRECONDITION", "Origin header is missing in CORS preflight")
      return 200, "{}"
    route = parse_route(method, path)
    request["model_name"], request["api"] = route.name, route.verb or ""
    if method == "GET":
      return 200, self._get(route)
    return 200, self._predict(route, body)

  def _read_body(self, environ):
    """The request body (waitress has already de-chunked it and applied the size cap)."""
    length = int(environ.get("CONTENT_LENGTH") or 0)
    if length > self.max_body_bytes:  # waitress has read it all: the connection stays usable
      raise RestError(
        "PAYLOAD_TOO_LARGE",
        f"Request body of {length} bytes exceeds the "
        f"{self.max_body_bytes}-byte limit (--max_body_bytes)",
      )
    data = environ["wsgi.input"].read(length) if length else b""
    if "gzip" in environ.get("HTTP_CONTENT_ENCODING", "").lower():
      limit = self.max_body_bytes * _MAX_DECOMPRESSED
      try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as f:
          data = f.read(limit + 1)
      except (OSError, EOFError, ValueError) as error:
        raise invalid(f"Unable to decompress gzip request body: {error}") from None
      if len(data) > limit:
        raise RestError("PAYLOAD_TOO_LARGE", "Decompressed request body exceeds the limit")
    return data

  def _get(self, route):
    if route.metadata:
      return _json(self.core.servable(route.name, route.version, route.label).metadata())
    # TF Serving's status ignores a label: /labels/L lists every version like the bare URL.
    return _json(self.core.status(route.name, route.version))

  def _predict(self, route, data):
    # TF Serving's order: parse the JSON, read signature_name, find the servable and
    # signature, then the tensors.
    body = parse_json(data)
    signature_name = signature_name_of(body)
    servable = self.core.servable(route.name, route.version, route.label)
    if route.verb != "predict":
      from serving.server_core import example_api_error  # (TensorFlow is loaded by now)

      raise example_api_error(servable, signature_name, route.verb)
    arrays, row_format = parse_predict_request(
      body, servable.input_specs(signature_name), signature_name
    )
    outputs = self.core.run(servable, signature_name, arrays, "Predict", self.timeout_seconds)
    return format_predict_response(outputs, row_format)


def _raw_path(environ):
  """The request path as sent (TF Serving matches it before decoding the name: a model name may
  hold %2F). waitress passes it as REQUEST_URI; other WSGI servers only give PATH_INFO, which is
  decoded (as latin-1), so it is quoted back."""
  if environ.get("REQUEST_URI"):
    return urllib.parse.urlsplit(environ["REQUEST_URI"]).path
  path = environ.get("SCRIPT_NAME", "") + environ.get("PATH_INFO", "")
  return urllib.parse.quote(path.encode("latin-1"), safe="/:@!$&'()*+,;=~")


def _json(value):
  return json.dumps(value)


def _status_line(status):
  try:
    return f"{status} {http.HTTPStatus(status).phrase}"
  except ValueError:  # 499, TF Serving's "client closed request"
    return f"{status} Client Closed Request"


class _JsonErrorTask(waitress.task.ErrorTask):
  """waitress's answer to a request it cannot parse (bad request line, header or chunk, body
  over the cap), as JSON like every other answer. Unsupported encodings are the client's
  mistake: 400, not waitress's 501."""

  def execute(self):
    error = self.request.error
    code = 400 if isinstance(error, waitress.utilities.ServerNotImplemented) else error.code
    body = error_body(f"{error.reason}: {error.body}").encode("utf-8")
    self.status = _status_line(code)
    self.response_headers.append(("Content-Type", "application/json"))
    self.set_close_on_finish()
    self.content_length = len(body)
    self.write(body)


class _JsonChannel(waitress.channel.HTTPChannel):
  error_task_class = _JsonErrorTask


def bind_socket(host, port):
  """A bound (not yet listening) TCP socket: a busy port fails here, before any model loads."""
  family = socket.AF_INET6 if ":" in host else socket.AF_INET
  sock = socket.socket(family, socket.SOCK_STREAM)
  sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
  try:
    sock.bind((host, port))
  except OSError:
    sock.close()
    raise
  return sock


def _never():
  return False


class RestServer:
  """waitress serving a RestApp on a bound socket, with http.server's serve_forever() and
  shutdown(), and a graceful shutdown: stop accepting, let requests in flight finish."""

  # How often waitress looks for connections silent past the read timeout: a connection is
  # closed at most this (plus one loop turn) after its timeout, not up to a timeout later.
  MAINTENANCE_SECONDS = 0.5

  def __init__(self, app, sock, threads=8, read_timeout_seconds=30):
    self.server_address = sock.getsockname()[:2]
    self._stopped = threading.Event()
    self._running = self._closing = False
    # waitress warns on every queued request under load ("Task queue depth"); keep errors.
    std_logging.getLogger("waitress").setLevel(std_logging.ERROR)
    self._server = waitress.create_server(
      app,
      sockets=[sock],
      threads=threads,
      ident=None,
      backlog=1024,
      channel_timeout=read_timeout_seconds,
      cleanup_interval=min(read_timeout_seconds, self.MAINTENANCE_SECONDS),
      # Bodies up to 4x the cap are read and answered 413 by the app on a connection that
      # stays usable (a client still sending sees the answer, not a reset); past that,
      # waitress answers 413 and closes without reading gigabytes.
      max_request_body_size=app.max_body_bytes * _MAX_DECOMPRESSED,
      expose_tracebacks=False,
      clear_untrusted_proxy_headers=False,
      asyncore_loop_timeout=self.MAINTENANCE_SECONDS,
    )
    self._server.channel_class = _JsonChannel

  def serve_forever(self):
    self._running = True
    try:
      self._server.run()
    except OSError as error:  # a socket closed under the loop once shutdown() has begun
      if not (self._closing and error.errno == errno.EBADF):
        raise
    finally:
      self._stopped.set()

  def _busy(self):
    dispatcher = self._server.task_dispatcher
    channels = [
      c for c in list(self._server._map.values()) if isinstance(c, waitress.channel.HTTPChannel)
    ]
    return (
      dispatcher.active_count
      or dispatcher.queue
      or any(c.requests or c.total_outbufs_len for c in channels)
    )

  def _in_loop(self, action):
    """Runs action() in waitress's loop thread, between two of its polls, and waits for it
    (sockets may only change there: one closed from another thread fails the loop's select
    with EBADF). Runs it here when the loop is not running or cannot be woken."""
    if not self._running or self._stopped.is_set():
      action()
      return
    done = threading.Event()

    def run():
      try:
        action()
      finally:
        done.set()

    try:
      self._server.trigger.pull_trigger(run)
    except OSError:  # its wake-up pipe is gone: do it here (serve_forever allows it)
      action()
      return
    done.wait(5)

  def _stop_reading(self):
    """No new connection, and no new request on an open one: idle connections close now;
    busy ones read nothing more, send their answer, and close with the rest."""
    self._server.accepting = False
    for channel in list(self._server._map.values()):
      if not isinstance(channel, waitress.channel.HTTPChannel):
        continue
      if channel.requests or channel.total_outbufs_len:
        channel.readable = _never  # the loop asks each channel before each poll
      else:
        channel.will_close = True

  def _close_all(self):
    """Closes every socket (the wake-up pipe too), which ends waitress's loop."""
    for dispatcher in list(self._server._map.values()):
      try:
        dispatcher.handle_close()
      except OSError:  # already closed
        self._server._map.pop(dispatcher._fileno, None)

  def shutdown(self, grace_seconds=10.0):
    """Stops taking requests, waits up to grace_seconds for those in flight and their
    answers, then closes every connection and stops serve_forever()."""
    self._closing = True
    self._in_loop(self._stop_reading)
    deadline = time.monotonic() + grace_seconds
    while self._busy() and time.monotonic() < deadline:
      time.sleep(0.05)
    self._in_loop(self._close_all)
    if self._running:
      self._stopped.wait(5)
    self._server.task_dispatcher.shutdown(timeout=1)

  def server_close(self):
    self.shutdown(0)


def make_server(
  models,
  host="127.0.0.1",
  port=8501,
  batcher=None,
  max_body_bytes=64 * 1024 * 1024,
  threads=8,
  read_timeout_seconds=30,
  sock=None,
  *,
  timeout_seconds=None,
  metrics=None,
  metrics_path=None,
  cors=False,
):
  """A RestServer on host:port (or a bound `sock`) for `models`: a ServerCore (the one the
  gRPC service shares), or one started ModelManager, served alone with `batcher`."""
  from serving.server_core import ServerCore  # (TensorFlow is loaded by now)

  if not isinstance(models, ServerCore):
    models = ServerCore([models], batcher=batcher)
  elif batcher is not None:
    raise ValueError("a ServerCore batches with its own batcher: pass it to ServerCore")
  app = RestApp(models, max_body_bytes, timeout_seconds, metrics, metrics_path, cors)
  return RestServer(app, sock or bind_socket(host, port), threads, read_timeout_seconds)


def _parse_labels(text):
  labels = {}
  for item in filter(None, (text or "").split(",")):
    label, _, version = item.partition("=")
    if not label or not version.isdigit():
      raise cli.UsageError(f"--version_labels entries look like stable=3, got {item!r}")
    labels[label] = int(version)
  return labels


def _parse_versions(items):
  if not all(v.strip().isdigit() for v in items):
    raise cli.UsageError(f"--versions takes version numbers like 1,2; got {','.join(items)}")
  return [int(v) for v in items]


def _check_model_base_path(path, flag="--model_base_path"):
  """The versions on disk; a missing or empty base path is a usage error."""
  if not os.path.isdir(path):
    raise cli.UsageError(
      f"{flag} {path} does not exist: pass the --base_path given to python -m serving.export"
    )
  found = version_numbers(path)
  if not found:
    raise cli.UsageError(
      f"{flag} {path} holds no version folder (<N>/saved_model.pb): export "
      f"one first with python -m serving.export --base_path={path}"
    )
  return found


def _model_configs():
  """The models to serve: --model_config_file's, or the one of --model_name/--model_base_path
  (with --model_version_policy, --versions, --version_labels). Usage errors name the flag."""
  from serving import model_config

  if FLAGS.model_config_file:
    for name in ("model_version_policy", "versions", "version_labels"):
      if FLAGS[name].present:
        raise cli.UsageError(
          f"--{name} applies to --model_base_path; with --model_config_file "
          "write it in the file (model_version_policy, version_labels)"
        )
    try:
      configs = model_config.read_file(FLAGS.model_config_file)
    except model_config.ConfigError as error:
      raise cli.UsageError(f"--model_config_file {FLAGS.model_config_file}: {error}") from None
    if not configs:
      raise cli.UsageError(
        f"--model_config_file {FLAGS.model_config_file} lists no model: "
        "model_config_list { config { name: ... base_path: ... "
        'model_platform: "tensorflow" } }'
      )
    for config in configs:
      _check_model_base_path(config.base_path, f"model {config.name}: base_path")
    return configs
  if not FLAGS.model_base_path:
    raise cli.UsageError(
      "--model_base_path is required: the directory that holds the "
      "exported versions (python -m serving.export --base_path=...), or "
      "give --model_config_file"
    )
  versions = _parse_versions(FLAGS.versions)
  if FLAGS.model_version_policy == "specific" and not versions:
    raise cli.UsageError("--model_version_policy=specific needs --versions, e.g. --versions=1,2")
  labels = _parse_labels(FLAGS.version_labels)
  _check_model_base_path(FLAGS.model_base_path)
  return model_config.single_model(
    FLAGS.model_name, FLAGS.model_base_path, FLAGS.model_version_policy, versions, labels
  )


def _batching_parameters():
  from serving.batching import BatchingParameters

  if not FLAGS.batching_parameters_file:
    return BatchingParameters()
  try:
    with open(FLAGS.batching_parameters_file) as f:
      return BatchingParameters.from_text_proto(f.read())
  except (OSError, ValueError) as error:
    raise cli.UsageError(f"--batching_parameters_file: {error}") from None


def _metrics_path():
  """The Prometheus page's path from --monitoring_config_file (None: no page)."""
  if not FLAGS.monitoring_config_file:
    return None
  from serving import monitoring

  try:
    return monitoring.read_config(FLAGS.monitoring_config_file)
  except ValueError as error:
    raise cli.UsageError(
      f"--monitoring_config_file {FLAGS.monitoring_config_file}: {error}"
    ) from None


def _grpc_channel_arguments():
  """--grpc_channel_arguments "key=value,..." (values that are integers passed as such)."""
  arguments = []
  for item in filter(None, FLAGS.grpc_channel_arguments.split(",")):
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
      raise cli.UsageError(
        f"--grpc_channel_arguments entries look like grpc.max_concurrent_streams=100, got {item!r}"
      )
    value = value.strip()
    arguments.append((key.strip(), int(value) if re.fullmatch(r"-?\d+", value) else value))
  return arguments


def _bind_or_fail(host, port, flag):
  try:
    return bind_socket(host, port)
  except OSError as error:
    raise cli.UsageError(
      f"cannot listen on {host}:{port} ({error.strerror}): pick another "
      f"{flag} (0 picks a free one) or stop what uses it"
    ) from None


def _check_ports():
  """Both ports, before TensorFlow starts: REST's socket is kept (it is the server's), gRPC's
  is only tried (grpcio binds its own)."""
  if FLAGS.port and FLAGS.port == FLAGS.rest_api_port:
    raise cli.UsageError(
      f"--rest_api_port and --port are both {FLAGS.port}: REST and gRPC need a port each"
    )
  rest = _bind_or_fail(FLAGS.rest_api_host, FLAGS.rest_api_port, "--rest_api_port")
  if FLAGS.port:
    _bind_or_fail(FLAGS.grpc_host, FLAGS.port, "--port").close()
  return rest


def _write_port_file(path, ports):
  with open(path + ".tmp", "w") as f:
    json.dump(ports, f)
  os.replace(path + ".tmp", path)


def _stop_on_signals(server):
  def handler(signum, frame):
    logging.info("signal %d: finishing requests in flight, then stopping", signum)
    threading.Thread(
      target=server.shutdown, args=(FLAGS.shutdown_grace_seconds,), daemon=True
    ).start()

  signal.signal(signal.SIGTERM, handler)
  signal.signal(signal.SIGINT, handler)


def _start_grpc(core, metrics):
  """The gRPC server on --grpc_host:--port (and --grpc_socket_path); (server, bound port)."""
  from serving import grpc_service

  address = f"{FLAGS.grpc_host}:{FLAGS.port}"
  addresses = [address] + ([f"unix:{FLAGS.grpc_socket_path}"] if FLAGS.grpc_socket_path else [])
  try:
    server, ports = grpc_service.make_server(
      core,
      addresses,
      FLAGS.grpc_max_threads,
      metrics,
      max_receive_bytes=FLAGS.grpc_max_message_bytes,
      channel_arguments=_grpc_channel_arguments(),
    )
  except RuntimeError as error:
    raise cli.UsageError(
      f"{error}: pick another --port (0 picks a free one) or --grpc_socket_path"
    ) from None
  return server, ports[address]


def main(argv):
  # Every check that needs no model comes first, those that need no TensorFlow before it loads:
  # flags and config files, the ports, the base paths; then the labels.
  configs = _model_configs()
  params = _batching_parameters()
  metrics_path = _metrics_path()
  _grpc_channel_arguments()
  sock = _check_ports()
  cli.start_tensorflow_quietly()
  logging.set_verbosity(logging.INFO)
  from serving import model_config
  from serving.batching import Batcher
  from serving.monitoring import Metrics
  from serving.server_core import ServerCore

  metrics = Metrics()
  batcher = Batcher(params) if FLAGS.enable_batching else None
  core = ServerCore.from_configs(
    configs,
    FLAGS.file_system_poll_wait_seconds,
    allow_version_labels_for_unavailable_models=(FLAGS.allow_version_labels_for_unavailable_models),
    batcher=batcher,
    metrics=metrics,
  )
  try:
    core.check_labels_on_disk()
  except model_config.ConfigError as error:
    raise cli.UsageError(str(error)) from None
  logging.info("configuration: %s", " ".join(f"--{n}={FLAGS[n].value}" for n in _OWN_FLAGS))
  core.start()
  if FLAGS.model_config_file and FLAGS.model_config_file_poll_wait_seconds > 0:
    core.watch_config_file(
      FLAGS.model_config_file, FLAGS.model_config_file_poll_wait_seconds, configs
    )
  grpc_server, grpc_port = _start_grpc(core, metrics)
  timeout = FLAGS.rest_api_timeout_in_ms / 1000 if FLAGS.rest_api_timeout_in_ms > 0 else None
  server = make_server(
    core,
    max_body_bytes=FLAGS.max_body_bytes,
    threads=FLAGS.rest_api_num_threads,
    read_timeout_seconds=FLAGS.rest_api_read_timeout_seconds,
    sock=sock,
    timeout_seconds=timeout,
    metrics=metrics,
    metrics_path=metrics_path,
    cors=FLAGS.rest_api_enable_cors_support,
  )
  port = server.server_address[1]
  _stop_on_signals(server)
  logging.info(
    "serving %s: REST at http://%s:%d/v1/models/NAME, gRPC at %s:%d%s",
    ", ".join(core.model_names()),
    FLAGS.rest_api_host,
    port,
    FLAGS.grpc_host,
    grpc_port,
    f", metrics at {metrics_path}" if metrics_path else "",
  )
  if FLAGS.port_file:
    _write_port_file(FLAGS.port_file, {"rest_api_port": port, "port": grpc_port})
  try:
    server.serve_forever()
  finally:
    grpc_server.stop(FLAGS.shutdown_grace_seconds).wait()
    core.stop()
    if batcher is not None:
      batcher.close()
  return 0


_OWN_FLAGS = (
  "model_name",
  "model_base_path",
  "model_config_file",
  "model_config_file_poll_wait_seconds",
  "port",
  "grpc_host",
  "grpc_socket_path",
  "grpc_max_threads",
  "grpc_max_message_bytes",
  "grpc_channel_arguments",
  "rest_api_port",
  "rest_api_host",
  "rest_api_num_threads",
  "rest_api_read_timeout_seconds",
  "rest_api_timeout_in_ms",
  "rest_api_enable_cors_support",
  "monitoring_config_file",
  "file_system_poll_wait_seconds",
  "model_version_policy",
  "versions",
  "version_labels",
  "allow_version_labels_for_unavailable_models",
  "enable_batching",
  "batching_parameters_file",
  "max_body_bytes",
  "shutdown_grace_seconds",
)


if __name__ == "__main__":
  _define_flags()
  cli.run(main)
