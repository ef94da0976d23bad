"""`python -m serving.server`: TensorFlow Serving's REST API for machines without
`tensorflow_model_server`.

  GET  /v1/models/NAME[/versions/N|/labels/L]            status
  GET  /v1/models/NAME[/versions/N|/labels/L]/metadata   signature defs
  POST /v1/models/NAME[/versions/N|/labels/L]:predict    row or columnar predict

Flags mirror tensorflow_model_server's. Binds 127.0.0.1 unless --rest_api_host says otherwise.
"""

import gzip
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from serving.tensor_json import (RestError, error_body, format_predict_response, invalid,
                                 parse_predict_request)

_PATH = re.compile(
    r"^/v1/models/(?P<name>[^/:]+)"
    r"(?:/versions/(?P<version>[^/:]+)|/labels/(?P<label>[^/:]+))?"
    r"(?:(?P<metadata>/metadata)|:(?P<verb>predict|classify|regress))?/?$")
_MAX_DECOMPRESSED = 4  # gzip bodies may expand to this many times the body-size cap


class RestHandler(BaseHTTPRequestHandler):
  protocol_version = "HTTP/1.1"
  server_version = "tfattn-serving"

  # Set by make_server().
  manager = None
  batcher = None
  max_body_bytes = 0

  def log_message(self, format, *args):  # quiet by default; absl logs what matters
    pass

  def _reply(self, status, body):
    data = body.encode("utf-8")
    self.send_response(status)
    self.send_header("Content-Type", "application/json")
    self.send_header("Content-Length", str(len(data)))
    self.end_headers()
    self.wfile.write(data)

  def _fail(self, error):
    self._reply(error.http_status, error_body(error.message))

  def _route(self, method):
    raw_path = urllib.parse.urlsplit(self.path).path
    # TF Serving matches the /v1/ prefix case-insensitively.
    path = "/v1/" + raw_path[4:] if raw_path[:4].lower() == "/v1/" else raw_path
    if method == "GET" and path.rstrip("/") == "/v1/models":
      raise invalid("Missing model name in request.")
    match = _PATH.match(path)
    malformed = invalid(f"Malformed request: {method} {raw_path}")
    if not match:
      raise malformed
    version = match.group("version")
    if version is not None and not version.isdigit():
      raise malformed
    is_post = match.group("verb") is not None
    if (method == "POST") != is_post:
      raise malformed
    name = urllib.parse.unquote(match.group("name"))
    label = match.group("label")
    return (name, int(version) if version is not None else None,
            urllib.parse.unquote(label) if label is not None else None, match)

  def _servable(self, name, version, label):
    if name != self.manager.name:
      spec = f"Specific({name}, {version})" if version is not None else f"Latest({name})"
      raise RestError("NOT_FOUND", f"Servable not found for request: {spec}")
    return self.manager.servable(version, label)

  def do_GET(self):
    try:
      name, version, label, match = self._route("GET")
      if match.group("metadata"):
        body = json.dumps(self._servable(name, version, label).metadata())
      else:
        if name != self.manager.name:
          raise RestError("NOT_FOUND", f"Could not find any versions of model {name}")
        if label is not None:
          version = self.manager.servable(label=label).version
        body = json.dumps(self.manager.status(version))
      self._reply(200, body)
    except RestError as error:
      self._fail(error)

  def _read_body(self):
    length = self.headers.get("Content-Length")
    if length is None or not length.isdigit():
      raise RestError("INVALID_ARGUMENT", "A request body with Content-Length is required")
    length = int(length)
    if length > self.max_body_bytes:
      # Read (and drop) a moderately oversized body so the client sees the 413 rather than a
      # reset connection; past that, close instead of reading gigabytes.
      remaining = length if length <= self.max_body_bytes * _MAX_DECOMPRESSED else 0
      while remaining > 0:
        chunk = self.rfile.read(min(remaining, 1 << 20))
        if not chunk:  # client gave up
          break
        remaining -= len(chunk)
      self.close_connection = length > self.max_body_bytes * _MAX_DECOMPRESSED
      raise RestError("PAYLOAD_TOO_LARGE", f"Request body of {length} bytes exceeds the "
                      f"{self.max_body_bytes}-byte limit")
    data = self.rfile.read(length)
    if "gzip" in self.headers.get("Content-Encoding", "").lower():
      try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as f:
          data = f.read(self.max_body_bytes * _MAX_DECOMPRESSED + 1)
      except (OSError, EOFError) as error:
        raise invalid(f"Unable to decompress gzip request body: {error}") from None
      if len(data) > self.max_body_bytes * _MAX_DECOMPRESSED:
        raise RestError("PAYLOAD_TOO_LARGE", "Decompressed request body exceeds the limit")
    return data

  def do_POST(self):
    try:
      data = self._read_body()
      name, version, label, match = self._route("POST")
      if match.group("verb") != "predict":
        raise invalid(f"{match.group('verb')} needs a {match.group('verb')} signature "
                      "(method_name tensorflow/serving/classify|regress); this model "
                      "exports predict signatures: use :predict")
      try:
        body = json.loads(data.decode("utf-8"))
      except UnicodeDecodeError:
        raise invalid("Request body is not valid UTF-8") from None
      except json.JSONDecodeError as error:
        raise invalid(f"JSON Parse error: {error.msg} at offset {error.pos}") from None
      servable = self._servable(name, version, label)
      signature_name = (body.get("signature_name", "serving_default")
                        if isinstance(body, dict) else "serving_default")
      if not isinstance(signature_name, str):
        raise invalid("'signature_name' must be a string")
      arrays, row_format = parse_predict_request(body, servable.input_specs(signature_name))
      if self.batcher is not None:
        outputs = self.batcher.run(servable, signature_name, arrays)
      else:
        outputs = servable.run(signature_name, arrays)
      self._reply(200, format_predict_response(outputs, row_format))
    except RestError as error:
      self._fail(error)
    except Exception as error:  # a bug must still answer JSON, and the server keeps serving
      from absl import logging
      logging.exception("predict failed")
      self._fail(RestError("INTERNAL", f"{type(error).__name__}: {str(error)[:300]}"))


def make_server(manager, host="127.0.0.1", port=8501, batcher=None,
                max_body_bytes=64 * 1024 * 1024):
  handler = type("BoundRestHandler", (RestHandler,),
                 {"manager": manager, "batcher": batcher, "max_body_bytes": max_body_bytes})
  server = ThreadingHTTPServer((host, port), handler)
  server.daemon_threads = True
  return server


def start_subprocess(model_name, model_base_path, port=0, extra_flags=(), timeout=180):
  """Starts `python -m serving.server` as a child process; returns (process, bound port) once it
  listens. Its log goes to a file (an unread pipe would stall a chatty server); the tail of
  that log is in the RuntimeError raised if the server exits or does not start in time."""
  work_dir = tempfile.mkdtemp(prefix="tfattn-server-")
  port_file = os.path.join(work_dir, "port")
  log_path = os.path.join(work_dir, "server.log")
  repo_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  with open(log_path, "w") as log:
    process = subprocess.Popen(
        [sys.executable, "-m", "serving.server", f"--model_name={model_name}",
         f"--model_base_path={model_base_path}", f"--rest_api_port={port}",
         f"--port_file={port_file}", *extra_flags], cwd=repo_root, stdout=log,
        stderr=subprocess.STDOUT)
  deadline = time.time() + timeout
  while not os.path.exists(port_file):
    if process.poll() is not None or time.time() > deadline:
      process.kill()
      process.wait()
      with open(log_path) as log:
        tail = log.read()[-3000:]
      raise RuntimeError(f"the server did not start (log {log_path}):\n{tail}")
    time.sleep(0.2)
  with open(port_file) as f:
    return process, int(f.read())


def _parse_labels(text):
  labels = {}
  for item in filter(None, (text or "").split(",")):
    label, _, version = item.partition("=")
    if not version.isdigit():
      raise ValueError(f"--version_labels entries look like stable=3, got {item!r}")
    labels[label] = int(version)
  return labels


def main(argv):
  from absl import flags, logging
  flags.DEFINE_string("model_name", "default", "Name the model is served under.")
  flags.DEFINE_string("model_base_path", None, "Directory holding numeric version folders.")
  flags.DEFINE_integer("rest_api_port", 8501, "REST port (0 picks a free one).")
  flags.DEFINE_string("rest_api_host", "127.0.0.1", "Address to bind (0.0.0.0 for all).")
  flags.DEFINE_float("file_system_poll_wait_seconds", 1.0, "Seconds between version polls.")
  flags.DEFINE_enum("model_version_policy", "latest", ["latest", "all", "specific"],
                    "Which versions to serve.")
  flags.DEFINE_list("versions", [], "Versions for --model_version_policy=specific.")
  flags.DEFINE_string("version_labels", "", "Labels, e.g. stable=1,canary=2.")
  flags.DEFINE_bool("enable_batching", False, "Merge concurrent requests into batches.")
  flags.DEFINE_string("batching_parameters_file", None,
                      "TF Serving batching parameters (text proto).")
  flags.DEFINE_integer("max_body_bytes", 64 * 1024 * 1024, "Largest accepted request body.")
  flags.DEFINE_string("port_file", None, "Write the bound port here once serving.")
  flags.mark_flag_as_required("model_base_path")
  flags.FLAGS(argv)
  f = flags.FLAGS
  logging.set_verbosity(logging.INFO)
  from serving.batching import Batcher, BatchingParameters
  from serving.model_manager import ModelManager
  try:
    manager = ModelManager(f.model_name, f.model_base_path, f.model_version_policy,
                           f.versions, _parse_labels(f.version_labels),
                           f.file_system_poll_wait_seconds)
    params = BatchingParameters()
    if f.batching_parameters_file:
      with open(f.batching_parameters_file) as fh:
        params = BatchingParameters.from_text_proto(fh.read())
  except (ValueError, OSError) as error:
    logging.error("%s", error)
    return 2
  manager.start()
  batcher = Batcher(params) if f.enable_batching else None
  server = make_server(manager, f.rest_api_host, f.rest_api_port, batcher, f.max_body_bytes)
  port = server.server_address[1]
  if f.port_file:
    with open(f.port_file + ".tmp", "w") as fh:
      fh.write(str(port))
    os.replace(f.port_file + ".tmp", f.port_file)
  logging.info("serving %s from %s at http://%s:%d/v1/models/%s", f.model_name,
               f.model_base_path, f.rest_api_host, port, f.model_name)
  try:
    server.serve_forever()
  except KeyboardInterrupt:
    pass
  finally:
    manager.stop()
    server.server_close()
  return 0


if __name__ == "__main__":
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  sys.exit(main(sys.argv))
