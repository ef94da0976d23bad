"""TF Serving's REST API as a WSGI application (its http_rest_api_handler.cc): a request path
-> a Route (model, version or label, verb), then status, metadata or :predict over the models
of a ServerCore, answered as TF Serving answers: JSON, with its HTTP status codes and texts.

  GET  /v1/models/NAME[/versions/N|/labels/L]            status
  GET  /v1/models/NAME[/versions/N|/labels/L]/metadata   signature defs
  POST /v1/models/NAME[/versions/N|/labels/L]:predict    row or columnar predict
  POST /v1/models/NAME[...]:classify / :regress          as TF Serving answers for these models
  GET  <metrics path>                                    Prometheus, with a monitoring config
"""

import dataclasses
import gzip
import io
import json
import re
import time
import urllib.parse

from absl import logging

from serving.server.errors import StatusError, error_body, invalid
from serving.server.http_server import RestServer, bind_socket, status_line
from serving.server.tensor_json import (
  format_predict_response,
  parse_json,
  parse_predict_request,
  signature_name_of,
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
MAX_DECOMPRESSED = 4  # gzip bodies may expand to this many times the body-size cap
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
  models of a ServerCore (shared with the gRPC service).

  Args:
    core: the `ServerCore` whose models answer.
    max_body_bytes: the largest request body accepted (larger: 413).
    timeout_seconds: a request's model run is stopped after this long (504; None: no limit).
    metrics: the `monitoring.Metrics` each request is counted in (None: not counted).
    metrics_path: where the Prometheus page is served (None: no page).
    cors: add Access-Control-Allow-* headers to every answer.
  """

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
    except StatusError as error:
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
    start_response(status_line(status), headers)
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
      raise StatusError("NOT_FOUND", f"Not found: {path} (the REST API is under /v1/)")
    if method == "OPTIONS":  # CORS preflight, as TF Serving's dispatcher answers it
      if not _CORS_ORIGIN.search(environ.get("HTTP_ORIGIN", "")):
        raise StatusError("FAILED_PRECONDITION", "Origin header is missing in CORS preflight")
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
      raise StatusError(
        "PAYLOAD_TOO_LARGE",
        f"Request body of {length} bytes exceeds the "
        f"{self.max_body_bytes}-byte limit (--max_body_bytes)",
      )
    data = environ["wsgi.input"].read(length) if length else b""
    if "gzip" in environ.get("HTTP_CONTENT_ENCODING", "").lower():
      limit = self.max_body_bytes * MAX_DECOMPRESSED
      try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as f:
          data = f.read(limit + 1)
      except (OSError, EOFError, ValueError) as error:
        raise invalid(f"Unable to decompress gzip request body: {error}") from None
      if len(data) > limit:
        raise StatusError("PAYLOAD_TOO_LARGE", "Decompressed request body exceeds the limit")
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
    if route.verb != "predict":
      return self._classify_or_regress(route, body, signature_name)
    servable = self.core.servable(route.name, route.version, route.label)
    arrays, row_format = parse_predict_request(
      body, servable.input_specs(signature_name), signature_name
    )
    outputs = self.core.run(servable, signature_name, arrays, "Predict", self.timeout_seconds)
    return format_predict_response(outputs, row_format)

  def _classify_or_regress(self, route, body, signature_name):
    """ProcessClassifyRequest / ProcessRegressRequest: the JSON examples, then the servable,
    then Classify or Regress as the gRPC API runs them."""
    from serving.server import example_apis  # (TensorFlow is loaded by now)

    request_input = example_apis.input_from_json(body)
    servable = self.core.servable(route.name, route.version, route.label)
    method = {"classify": example_apis.CLASSIFY_METHOD, "regress": example_apis.REGRESS_METHOD}
    result = example_apis.run(
      self.core, servable, signature_name, method[route.verb], request_input, self.timeout_seconds
    )
    return example_apis.result_json(result)


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
  connection_limit=None,
):
  """A RestServer on host:port (or a bound `sock`) for `models`: a ServerCore (the one the
  gRPC service shares), or one started ModelManager, served alone with `batcher`.
  connection_limit: connections held at once (None: from the process's file limit)."""
  from serving.server.server_core import ServerCore  # (TensorFlow is loaded by now)

  if not isinstance(models, ServerCore):
    models = ServerCore([models], batcher=batcher)
  elif batcher is not None:
    raise ValueError("a ServerCore batches with its own batcher: pass it to ServerCore")
  app = RestApp(models, max_body_bytes, timeout_seconds, metrics, metrics_path, cors)
  return RestServer(
    app,
    sock or bind_socket(host, port),
    threads,
    read_timeout_seconds,
    # Bodies up to 4x the cap are read and answered 413 by the app on a connection that stays
    # usable (a client still sending sees the answer, not a reset); past that, waitress
    # answers 413 and closes without reading gigabytes.
    max_request_bytes=max_body_bytes * MAX_DECOMPRESSED,
    connection_limit=connection_limit,
  )
