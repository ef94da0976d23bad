"""`python -m serving.server`: TensorFlow Serving's REST API for machines without
`tensorflow_model_server`.

  GET  /v1/models/NAME[/versions/N|/labels/L]            status
  GET  /v1/models/NAME[/versions/N|/labels/L]/metadata   signature defs
  POST /v1/models/NAME[/versions/N|/labels/L]:predict    row or columnar predict

Flags mirror tensorflow_model_server's. HTTP/1.1 (keep-alive, chunked bodies, read timeouts,
listen backlog) is waitress's; this module maps requests to TF Serving's answers, always JSON.
Binds 127.0.0.1 unless --rest_api_host says otherwise.
"""

import cli

import collections
import dataclasses
import gzip
import http
import io
import json
import logging as std_logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
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
  flags.DEFINE_string("model_name", "default", "Name the model is served under.")
  flags.DEFINE_string("model_base_path", None,
                      "Directory holding numeric version folders (<path>/<N>/saved_model.pb). "
                      "Required.")
  flags.DEFINE_integer("rest_api_port", 8501, "REST port (0 picks a free one).", lower_bound=0,
                       upper_bound=65535)
  flags.DEFINE_string("rest_api_host", "127.0.0.1",
                      "Address to bind: 127.0.0.1 serves this machine only, 0.0.0.0 every "
                      "interface.")
  flags.DEFINE_integer("rest_api_num_threads", 4 * (os.cpu_count() or 1),
                       "Requests processed at once (TF Serving's default: 4 x CPUs).",
                       lower_bound=1)
  flags.DEFINE_integer("rest_api_read_timeout_seconds", 30,
                       "Close a connection that sends nothing for this many seconds (a half-sent "
                       "request or an idle keep-alive connection).", lower_bound=1)
  flags.DEFINE_float("file_system_poll_wait_seconds", 1.0,
                     "Seconds between looks for new versions under --model_base_path.",
                     lower_bound=0.01)
  flags.DEFINE_enum("model_version_policy", "latest", ["latest", "all", "specific"],
                    "Which versions to serve: the newest, all, or --versions.")
  flags.DEFINE_list("versions", [], "Versions served with --model_version_policy=specific, "
                    "e.g. 1,2.")
  flags.DEFINE_string("version_labels", "",
                      "Labels for /labels/L URLs, e.g. stable=1,canary=2; each must name a "
                      "served version (see --allow_version_labels_for_unavailable_models).")
  flags.DEFINE_bool("allow_version_labels_for_unavailable_models", False,
                    "Accept labels naming versions that are not served (TF Serving's flag); "
                    "requests for such a label answer 404 until the version is served.")
  flags.DEFINE_bool("enable_batching", False, "Merge concurrent requests into batches.")
  flags.DEFINE_string("batching_parameters_file", None,
                      "TF Serving batching parameters (text proto), used with "
                      "--enable_batching.")
  flags.DEFINE_integer("max_body_bytes", 64 * 1024 * 1024,
                       "Largest accepted request body in bytes (larger: 413).", lower_bound=1)
  flags.DEFINE_string("port_file", None, "Write the bound port to this file once serving.")
  flags.DEFINE_float("shutdown_grace_seconds", 10.0,
                     "On SIGTERM/SIGINT, stop accepting and let requests in flight finish for "
                     "up to this long.", lower_bound=0)

# TF Serving's patterns (http_rest_api_util.cc): case-insensitive, ASCII digits only.
_API_PATH = re.compile(r"/v1/.*", re.IGNORECASE | re.DOTALL)
_PREDICT_PATH = re.compile(
    r"/v1/models/([^/:]+)(?:(?:/versions/(\d+))|(?:/labels/([^/:]+)))?"
    r":(classify|regress|predict)", re.IGNORECASE | re.ASCII)
_STATUS_PATH = re.compile(
    r"/v1/models(?:/([^/:]+))?(?:(?:/versions/(\d+))|(?:/labels/([^/:]+)))?(?:/(metadata))?",
    re.IGNORECASE | re.ASCII)
_INT64_MAX = 2**63 - 1
_MAX_DECOMPRESSED = 4  # gzip bodies may expand to this many times the body-size cap
_CORS_ORIGIN = re.compile(r"https?://")


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
  route = Route(urllib.parse.unquote(name or ""), int(version) if version else None,
                urllib.parse.unquote(label) if label else None,
                last if method == "POST" else None, method == "GET" and last is not None)
  if method == "GET" and not route.name:
    raise invalid("Missing model name in request.")
  if method == "POST" and route.verb not in ("predict", "classify", "regress"):
    raise invalid(f"Malformed request: {method} {path}")  # TF Serving compares verbs exactly
  return route


class RestApp:
  """The WSGI application: one TF Serving REST request -> (HTTP status, JSON text)."""

  def __init__(self, manager, batcher=None, max_body_bytes=64 * 1024 * 1024):
    self.manager, self.batcher, self.max_body_bytes = manager, batcher, max_body_bytes

  def __call__(self, environ, start_response):
    try:
      status, body = self.respond(environ)
    except RestError as error:
      status, body = error.http_status, error_body(error.message)
    except Exception as error:  # a bug must still answer JSON, and the server keeps serving
      logging.exception("request failed")
      status, body = 500, error_body(f"{type(error).__name__}: {str(error)[:300]}")
    data = body.encode("utf-8")
    start_response(_status_line(status), [("Content-Type", "application/json"),
                                          ("Content-Length", str(len(data)))])
    return [data]

  def respond(self, environ):
    method = environ["REQUEST_METHOD"]
    path = _raw_path(environ)
    body = self._read_body(environ)  # read for every method, so keep-alive stays in step
    if not _API_PATH.fullmatch(path):
      raise RestError("NOT_FOUND", f"Not found: {path} (the REST API is under /v1/)")
    if method == "OPTIONS":  # CORS preflight, as TF Serving's dispatcher answers it
      if not _CORS_ORIGIN.search(environ.get("HTTP_ORIGIN", "")):
        raise RestError("FAILED_PRECONDITION", "Origin header is missing in CORS preflight")
      return 200, "{}"
    route = parse_route(method, path)
    if method == "GET":
      return 200, self._get(route)
    return 200, self._predict(route, body)

  def _read_body(self, environ):
    """The request body (waitress has already de-chunked it and applied the size cap)."""
    length = int(environ.get("CONTENT_LENGTH") or 0)
    if length > self.max_body_bytes:  # waitress has read it all: the connection stays usable
      raise RestError("PAYLOAD_TOO_LARGE", f"Request body of {length} bytes exceeds the "
                      f"{self.max_body_bytes}-byte limit (--max_body_bytes)")
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
      return _json(self._servable(route).metadata())
    if route.name != self.manager.name:
      if route.version is not None:
        raise RestError("NOT_FOUND",
                        f"Could not find version {route.version} of model {route.name}")
      raise RestError("NOT_FOUND", f"Could not find any versions of model {route.name}")
    # TF Serving's status ignores a label: /labels/L lists every version like the bare URL.
    return _json(self.manager.status(route.version))

  def _servable(self, route):
    if route.name != self.manager.name:
      spec = (f"Specific({route.name}, {route.version})" if route.version is not None
              else f"Latest({route.name})")
      raise RestError("NOT_FOUND", f"Servable not found for request: {spec}")
    return self.manager.servable(route.version, route.label)

  def _predict(self, route, data):
    # TF Serving's order: parse the JSON, read signature_name, find the servable and
    # signature, then the tensors.
    body = parse_json(data)
    signature_name = signature_name_of(body)
    servable = self._servable(route)
    if route.verb != "predict":
      raise invalid(f"Expected {route.verb} signature method_name to be "
                    f"tensorflow/serving/{route.verb}: this model exports predict signatures "
                    "(tensorflow/serving/predict); use :predict")
    arrays, row_format = parse_predict_request(body, servable.input_specs(signature_name))
    if self.batcher is not None:
      outputs = self.batcher.run(servable, signature_name, arrays)
    else:
      outputs = servable.run(signature_name, arrays)
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


class RestServer:
  """waitress serving a RestApp on a bound socket, with http.server's serve_forever() and
  shutdown(), and a graceful shutdown: stop accepting, let requests in flight finish."""

  def __init__(self, app, sock, threads=8, read_timeout_seconds=30):
    self.server_address = sock.getsockname()[:2]
    self._stopped = threading.Event()
    # waitress warns on every queued request under load ("Task queue depth"); keep errors.
    std_logging.getLogger("waitress").setLevel(std_logging.ERROR)
    self._server = waitress.create_server(
        app, sockets=[sock], threads=threads, ident=None, backlog=1024,
        channel_timeout=read_timeout_seconds, cleanup_interval=min(read_timeout_seconds, 30),
        # Bodies up to 4x the cap are read and answered 413 by the app on a connection that
        # stays usable (a client still sending sees the answer, not a reset); past that,
        # waitress answers 413 and closes without reading gigabytes.
        max_request_body_size=app.max_body_bytes * _MAX_DECOMPRESSED, expose_tracebacks=False,
        clear_untrusted_proxy_headers=False, asyncore_loop_timeout=1)
    self._server.channel_class = _JsonChannel

  def serve_forever(self):
    try:
      self._server.run()
    finally:
      self._stopped.set()

  def _busy(self):
    dispatcher = self._server.task_dispatcher
    channels = [c for c in list(self._server._map.values())
                if isinstance(c, waitress.channel.HTTPChannel)]
    return (dispatcher.active_count or dispatcher.queue or
            any(c.requests or c.total_outbufs_len for c in channels))

  def shutdown(self, grace_seconds=10.0):
    """Stops accepting, waits up to grace_seconds for requests in flight and their answers,
    then closes every connection and stops serve_forever()."""
    self._server.accepting = False  # the loop stops polling the listening socket
    deadline = time.monotonic() + grace_seconds
    while self._busy() and time.monotonic() < deadline:
      time.sleep(0.05)
    for dispatcher in list(self._server._map.values()):
      dispatcher.handle_close()
    self._server.task_dispatcher.shutdown(timeout=1)
    self._stopped.wait(5)

  def server_close(self):
    self.shutdown(0)


def make_server(manager, host="127.0.0.1", port=8501, batcher=None,
                max_body_bytes=64 * 1024 * 1024, threads=8, read_timeout_seconds=30,
                sock=None):
  """A RestServer for `manager` on host:port (or an already bound `sock`)."""
  app = RestApp(manager, batcher, max_body_bytes)
  return RestServer(app, sock or bind_socket(host, port), threads, read_timeout_seconds)


class _LogTail:
  """Drains a child's output pipe (an unread pipe would stall a chatty server) and keeps the
  last lines for error messages."""

  def __init__(self, pipe, lines=60):
    self._lines = collections.deque(maxlen=lines)
    self._thread = threading.Thread(target=self._drain, args=(pipe,), daemon=True)
    self._thread.start()

  def _drain(self, pipe):
    for line in iter(pipe.readline, b""):
      self._lines.append(line.decode("utf-8", "replace"))
    pipe.close()

  def text(self):
    self._thread.join(timeout=2)
    return "".join(self._lines)


def start_subprocess(model_name, model_base_path, port=0, extra_flags=(), timeout=180):
  """Starts `python -m serving.server` as a child process; returns (process, bound port) once it
  listens. The tail of its log is in the RuntimeError raised if the server exits or does not
  start in time, and in `process.log_tail()`. Leaves no files behind."""
  work_dir = tempfile.mkdtemp(prefix="tfattn-server-")
  port_file = os.path.join(work_dir, "port")
  repo_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  try:
    process = subprocess.Popen(
        [sys.executable, "-m", "serving.server", f"--model_name={model_name}",
         f"--model_base_path={model_base_path}", f"--rest_api_port={port}",
         f"--port_file={port_file}", *extra_flags], cwd=repo_root, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT)
    process.log_tail = _LogTail(process.stdout).text
    deadline = time.time() + timeout
    while not os.path.exists(port_file):
      if process.poll() is not None or time.time() > deadline:
        process.kill()
        process.wait()
        error = RuntimeError(f"the server did not start (exit status {process.returncode}):"
                             f"\n{process.log_tail()[-3000:]}")
        error.returncode = process.returncode  # 2: the user's mistake (see cli.py)
        raise error
      time.sleep(0.1)
    with open(port_file) as f:
      return process, int(f.read())
  finally:
    shutil.rmtree(work_dir, ignore_errors=True)


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


def _check_model_base_path(path):
  """The versions on disk; a missing or empty base path is a usage error."""
  if not os.path.isdir(path):
    raise cli.UsageError(f"--model_base_path {path} does not exist: pass the --base_path "
                         "given to python -m serving.export")
  found = version_numbers(path)
  if not found:
    raise cli.UsageError(f"--model_base_path {path} holds no version folder "
                         f"(<N>/saved_model.pb): export one first with python -m serving.export "
                         f"--base_path={path}")
  return found


def _check_labels(labels, served, allow_unavailable):
  """TF Serving refuses a label naming a version it does not serve (UpdateModelVersionLabelMap)
  unless --allow_version_labels_for_unavailable_models."""
  for label, version in sorted(labels.items()):
    if version not in served and not allow_unavailable:
      raise cli.UsageError(
          f"Request to assign label {label} to version {version} of model {FLAGS.model_name}, "
          f"which is not currently available for inference (served: "
          f"{','.join(map(str, sorted(served))) or 'none'}): serve it with "
          f"--model_version_policy=specific --versions=... (or =all), or pass "
          f"--allow_version_labels_for_unavailable_models")


def _batching_parameters():
  from serving.batching import BatchingParameters
  if not FLAGS.batching_parameters_file:
    return BatchingParameters()
  try:
    with open(FLAGS.batching_parameters_file) as f:
      return BatchingParameters.from_text_proto(f.read())
  except (OSError, ValueError) as error:
    raise cli.UsageError(f"--batching_parameters_file: {error}") from None


def _bind_or_fail(host, port):
  try:
    return bind_socket(host, port)
  except OSError as error:
    raise cli.UsageError(f"cannot listen on {host}:{port} ({error.strerror}): pick another "
                         "--rest_api_port (0 picks a free one) or stop what uses it") from None


def _write_port_file(path, port):
  with open(path + ".tmp", "w") as f:
    f.write(str(port))
  os.replace(path + ".tmp", path)


def _stop_on_signals(server):
  def handler(signum, frame):
    logging.info("signal %d: finishing requests in flight, then stopping", signum)
    threading.Thread(target=server.shutdown, args=(FLAGS.shutdown_grace_seconds,),
                     daemon=True).start()
  signal.signal(signal.SIGTERM, handler)
  signal.signal(signal.SIGINT, handler)


def main(argv):
  # Every check that needs no model comes first, those that need no TensorFlow before it loads:
  # flags, the port, then the base path and labels.
  if not FLAGS.model_base_path:
    raise cli.UsageError("--model_base_path is required: the directory that holds the "
                         "exported versions (python -m serving.export --base_path=...)")
  versions = _parse_versions(FLAGS.versions)
  if FLAGS.model_version_policy == "specific" and not versions:
    raise cli.UsageError("--model_version_policy=specific needs --versions, e.g. --versions=1,2")
  labels = _parse_labels(FLAGS.version_labels)
  params = _batching_parameters()
  on_disk = _check_model_base_path(FLAGS.model_base_path)
  sock = _bind_or_fail(FLAGS.rest_api_host, FLAGS.rest_api_port)
  cli.start_tensorflow_quietly()
  logging.set_verbosity(logging.INFO)
  from serving.batching import Batcher
  from serving.model_manager import ModelManager
  manager = ModelManager(FLAGS.model_name, FLAGS.model_base_path, FLAGS.model_version_policy,
                         versions, labels, FLAGS.file_system_poll_wait_seconds)
  _check_labels(labels, manager.wanted_versions(on_disk),
                FLAGS.allow_version_labels_for_unavailable_models)
  logging.info("configuration: %s", " ".join(f"--{n}={FLAGS[n].value}" for n in _OWN_FLAGS))
  manager.start()
  batcher = Batcher(params) if FLAGS.enable_batching else None
  server = make_server(manager, batcher=batcher, max_body_bytes=FLAGS.max_body_bytes,
                       threads=FLAGS.rest_api_num_threads,
                       read_timeout_seconds=FLAGS.rest_api_read_timeout_seconds, sock=sock)
  port = server.server_address[1]
  _stop_on_signals(server)
  logging.info("serving %s from %s at http://%s:%d/v1/models/%s", FLAGS.model_name,
               FLAGS.model_base_path, FLAGS.rest_api_host, port, FLAGS.model_name)
  if FLAGS.port_file:
    _write_port_file(FLAGS.port_file, port)
  try:
    server.serve_forever()
  finally:
    manager.stop()
    if batcher is not None:
      batcher.close()
  return 0


_OWN_FLAGS = ("model_name", "model_base_path", "rest_api_port", "rest_api_host",
              "rest_api_num_threads", "rest_api_read_timeout_seconds",
              "file_system_poll_wait_seconds", "model_version_policy", "versions",
              "version_labels", "allow_version_labels_for_unavailable_models",
              "enable_batching", "batching_parameters_file", "max_body_bytes",
              "shutdown_grace_seconds")


if __name__ == "__main__":
  _define_flags()
  cli.run(main)
