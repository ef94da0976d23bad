"""serving.server against TF Serving's own behaviour, case by case. Each case names the TF Serving
test (tensorflow_serving/model_servers/http_rest_api_handler_test.cc, util/json_tensor_test.cc)
or, where no test asserts it, the source file and function it follows."""

import http.client
import json
import socket
import threading
import time

import numpy as np
import pytest
import tensorflow as tf

from serving.server import model_manager
from serving.server.model_manager import ModelManager
from serving.server.rest_api import make_server
from serving.server.server_core import ServerCore

NAME = "numbers"
UINT64_MAX = 2**64 - 1


def _half_plus_two(base):
  """TF Serving's test model half_plus_two, TF1 style: input x of unknown rank, y = x / 2 + 2;
  a second signature `finite` fails at run time on NaN (a TensorFlow error to pass through)."""
  path = str(base / "123")
  with tf.Graph().as_default(), tf.compat.v1.Session() as session:
    x = tf.compat.v1.placeholder(tf.float32, shape=None, name="x")  # unknown rank
    a = tf.compat.v1.Variable(0.5, name="a")
    y = tf.add(a * x, 2.0, name="y")
    checked = tf.debugging.check_numerics(x, "x must be finite", name="checked")
    session.run(tf.compat.v1.global_variables_initializer())
    builder = tf.compat.v1.saved_model.Builder(path)
    signature = tf.compat.v1.saved_model.predict_signature_def
    builder.add_meta_graph_and_variables(
      session,
      ["serve"],
      signature_def_map={
        "serving_default": signature({"x": x}, {"y": y}),
        "finite": signature({"x": x}, {"checked": checked}),
      },
    )
    builder.save()
  return base


def _serve(name, base, labels=None):
  manager = ModelManager(name, str(base), labels=labels, poll_seconds=0.2)
  core = ServerCore([manager])
  core.start()
  server = make_server(core, "127.0.0.1", 0)
  threading.Thread(target=server.serve_forever, daemon=True).start()
  return manager, server


@pytest.fixture(scope="module")
def ports(exported, tmp_path_factory):
  """{"numbers": port of our seq2seq export, "half_plus_two": port of the TF1 model}."""
  base, _ = exported
  served = [
    _serve(NAME, base),
    _serve(
      "half_plus_two",
      _half_plus_two(tmp_path_factory.mktemp("half_plus_two")),
      labels={"stable": 123},
    ),
  ]
  yield {NAME: served[0][1].server_address[1], "half_plus_two": served[1][1].server_address[1]}
  for manager, server in served:
    server.shutdown(0)
    manager.stop()


def _request(port, method, path, body=None, headers=None, connection=None):
  """(status, parsed JSON body or None for an empty body, response headers)."""
  own = connection is None
  connection = connection or http.client.HTTPConnection("127.0.0.1", port, timeout=60)
  try:
    connection.request(method, path, body, headers or {})
    response = connection.getresponse()
    data = response.read()
    return response.status, json.loads(data) if data else None, response.headers
  finally:
    if own:
      connection.close()


def _raw(port, data):
  """Sends raw bytes, returns (status code, JSON body) of the answer."""
  with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
    sock.sendall(data)
    received = b""
    while b"\r\n\r\n" not in received or len(received.split(b"\r\n\r\n", 1)[1]) < int(
      _header(received, b"content-length") or 0
    ):
      chunk = sock.recv(65536)
      if not chunk:
        break
      received += chunk
  head, _, body = received.partition(b"\r\n\r\n")
  return int(head.split()[1]), json.loads(body)


def _header(received, name):
  for line in received.split(b"\r\n\r\n", 1)[0].split(b"\r\n")[1:]:
    key, _, value = line.partition(b":")
    if key.strip().lower() == name:
      return value.strip()
  return None


# (TF Serving test, method, path, status, message substring); the model is "numbers".
PATH_CASES = [
  ("UnsupportedApiCalls", "GET", "/v1/foo", 400, "Malformed request: GET /v1/foo"),
  ("UnsupportedApiCalls", "POST", "/v1/foo", 400, "Malformed request: POST /v1/foo"),
  ("UnsupportedApiCalls", "GET", "/v1/models", 400, "Missing model name in request."),
  ("UnsupportedApiCalls", "GET", "/v1/models/debug/model_name", 400, "Malformed request"),
  ("UnsupportedApiCalls", "POST", "/v1/models", 400, "Malformed request"),
  ("UnsupportedApiCalls", "GET", "/v1/models/foo:predict", 400, "Malformed request"),
  ("UnsupportedApiCalls", "GET", "/v1/models/foo/version/50:predict", 400, "Malformed request"),
  ("UnsupportedApiCalls", "POST", "/v1/models/foo/version/50:regress", 400, "Malformed request"),
  (
    "UnsupportedApiCalls",
    "POST",
    "/v1/models/foo/versions/HELLO:regress",
    400,
    "Malformed request",
  ),
  (
    "UnsupportedApiCalls",
    "POST",
    f"/v1/models/foo/versions/{UINT64_MAX}:regress",
    400,
    "Failed to convert version",
  ),
  ("UnsupportedApiCalls", "POST", "/v1/models/foo/metadata", 400, "Malformed request"),
  (
    "UnsupportedApiCalls",
    "POST",
    "/v1/models/foo/label/some_label:regress",
    400,
    "Malformed request",
  ),
  (
    "UnsupportedApiCalls",
    "POST",
    "/v1/models/foo/versions/50/labels/some_label:regress",
    400,
    "Malformed request",
  ),
  (
    "UnsupportedApiCalls",
    "POST",
    "/v1/models/foo/versions/some_label:regress",
    400,
    "Malformed request",
  ),
  # ParseModelInfo: absl::SimpleAtoi fails past int64.
  (
    "ParseModelInfo",
    "GET",
    f"/v1/models/{NAME}/versions/{2**63}",
    400,
    f"Failed to convert version: {2**63} to numeric.",
  ),
  (
    "GetModelStatusWithModelSpec",
    "GET",
    f"/v1/models/{NAME}/versions/{2**63 - 1}",
    404,
    f"Could not find version {2**63 - 1} of model {NAME}",
  ),
  # The handler dispatches GET and POST only: any other method is a malformed request.
  ("ProcessRequest", "PUT", f"/v1/models/{NAME}", 400, "Malformed request: PUT /v1/models"),
  ("ProcessRequest", "DELETE", f"/v1/models/{NAME}", 400, "Malformed request: DELETE"),
  ("ProcessRequest", "PATCH", f"/v1/models/{NAME}:predict", 400, "Malformed request: PATCH"),
  # kPathRegex: only (?i)/v1/.* reaches the handler; evhttp answers 404 to the rest.
  ("kPathRegex", "GET", "/statuspage", 404, "Not found"),
  ("kPathRegex", "GET", "/index", 404, "Not found"),
  ("kPathRegex", "POST", "/v2/models/numbers:predict", 404, "Not found"),
  # PredictModelNameVersionErrors
  (
    "PredictModelNameVersionErrors",
    "POST",
    "/v1/models/foo:predict",
    404,
    "Servable not found for request: Latest(foo)",
  ),
  (
    "PredictModelNameVersionErrors",
    "POST",
    "/v1/models/foo/versions/50:predict",
    404,
    "Servable not found for request: Specific(foo, 50)",
  ),
  (
    "PredictModelNameVersionErrors",
    "POST",
    f"/v1/models/{NAME}/versions/99:predict",
    404,
    f"Servable not found for request: Specific({NAME}, 99)",
  ),
  # The patterns are case-insensitive (?i), but the verb is compared exactly.
  ("kPredictionApiGegex", "POST", f"/v1/models/{NAME}:PREDICT", 400, "Malformed request"),
]


@pytest.mark.parametrize(
  "test,method,path,status,message",
  PATH_CASES,
  ids=[f"{c[0]}-{c[1]}-{c[2][:40]}" for c in PATH_CASES],
)
def test_paths_and_methods(ports, test, method, path, status, message):
  body = b'{"instances": ["1"]}' if method in ("POST", "PUT", "PATCH") else None
  code, payload, headers = _request(ports[NAME], method, path, body)
  assert (code, headers["Content-Type"]) == (status, "application/json"), payload
  assert message in payload["error"]


def test_patterns_are_case_insensitive(ports):
  """kModelStatusApiRegex / kPredictionApiGegex carry (?i)."""
  port = ports[NAME]
  assert _request(port, "GET", f"/V1/MODELS/{NAME}")[0] == 200
  assert _request(port, "GET", f"/v1/Models/{NAME}/Versions/1/METADATA")[0] == 200
  code, payload, _ = _request(port, "POST", f"/V1/Models/{NAME}:predict", b'{"instances": ["12"]}')
  assert code == 200 and len(payload["predictions"]) == 1


def test_non_ascii_digits_are_not_a_version(ports):
  """RE2's \\d is ASCII: an Arabic-Indic digit makes the path malformed (it once dropped the
  connection)."""
  code, payload = _raw(
    ports[NAME], b"GET /v1/models/numbers/versions/%D9%A3 HTTP/1.1\r\nHost: x\r\n\r\n"
  )
  assert code == 400 and "Malformed request" in payload["error"]
  # Unencoded, the byte is not allowed in a request line at all: still a JSON 400.
  code, payload = _raw(
    ports[NAME],
    "GET /v1/models/numbers/versions/\u0663 HTTP/1.1\r\nHost: x\r\n\r\n".encode("utf-8"),
  )
  assert code == 400 and payload["error"]


def test_head_and_options(ports):
  """HEAD is a malformed request (no body in the answer); OPTIONS is the CORS preflight that
  http_server.cc's RestApiRequestDispatcher answers 200 when an Origin is sent."""
  port = ports[NAME]
  code, payload, headers = _request(port, "HEAD", f"/v1/models/{NAME}")
  assert (code, payload, headers["Content-Type"]) == (400, None, "application/json")
  code, payload, _ = _request(
    port, "OPTIONS", f"/v1/models/{NAME}:predict", headers={"Origin": "http://example.com"}
  )
  assert code == 200
  code, payload, _ = _request(port, "OPTIONS", f"/v1/models/{NAME}:predict")
  assert code == 400 and payload == {"error": "Origin header is missing in CORS preflight"}


# (TF Serving test, model, body, status, message substring).
PREDICT_ERRORS = [
  ("PredictRequestErrors", "half_plus_two", b"", 400, "JSON Parse error: The document is empty"),
  (
    "PredictRequestErrors",
    "half_plus_two",
    b"instances = [1, 2]",
    400,
    "JSON Parse error: Invalid value",
  ),
  (
    "PredictRequestErrors",
    "half_plus_two",
    b'{ "instances": ["x", "y"] }',
    400,
    "not of expected type: float",
  ),
  (
    "PredictRequestErrors",
    "half_plus_two",
    b'{ "signature_name": 100 }',
    400,
    "'signature_name' key must be a string value.",
  ),
  (
    "SingleUnnamedTensorErrors",
    "half_plus_two",
    b'{"instances": [[1,2],[3,4],[5,6,7]], "inputs": [[1,2],[3,4],[5,6,7]]}',
    400,
    "Not formatted correctly",
  ),
  (
    "SingleUnnamedTensorErrors",
    "half_plus_two",
    b'{"instances": [[1,2],[3,4],[5,6,7]]}',
    400,
    "Expecting tensor size",
  ),
  (
    "SingleUnnamedTensorErrors",
    "half_plus_two",
    b'{"instances": [[1,2],[3,4],[[5,6]]]}',
    400,
    "Expecting shape",
  ),
  (
    "SingleUnnamedTensorErrors",
    "half_plus_two",
    b'{"instances": [1, [1]]}',
    400,
    "Expecting shape",
  ),
  (
    "SingleUnnamedTensorErrors",
    "half_plus_two",
    b'{"instances": [[1,2],["a", "b"]]}',
    400,
    "not of expected type",
  ),
  (
    "DeeplyNestedMalformed",
    "half_plus_two",
    b'{"signature_name": ' + b"[" * 50 + b"]" * 50 + b"}",
    400,
    "key must be a string value",
  ),
  (
    "MultipleNamedTensorErrors",
    NAME,
    b'{"signature_name": "score", "instances": [{"source_ids": [1], "target_ids": [2]}, '
    b"[1, 20, 30]]}",
    400,
    "Expecting object but got list",
  ),
  (
    "MultipleNamedTensorErrors",
    NAME,
    b'{"instances": ["baz", {"text": "bat"}]}',
    400,
    "Expecting value/list but got object",
  ),
  (
    "MultipleNamedTensorErrors",
    NAME,
    b'{"signature_name": "score", "instances": [{"source_ids": [1, 2], "target_ids": [2]}, '
    b'{"source_ids": [1], "target_ids": [2]}]}',
    400,
    "Expecting tensor size",
  ),
  (
    "FillTensorMapFromInstancesList",
    NAME,
    b'{"signature_name": "score", "instances": [[1], [2]]}',
    400,
    "instances is a plain list, but expecting list of objects",
  ),
  (
    "FillTensorMapFromInputsMap",
    NAME,
    b'{"signature_name": "score", "inputs": [[1]]}',
    400,
    "inputs is a plain value/list, but expecting an object",
  ),
  (
    "GetInfoMap",
    NAME,
    b'{"signature_name": "nope", "instances": ["1"]}',
    400,
    'Serving signature name: "nope" not found in signature def',
  ),
  (
    "IsValBase64Object",
    NAME,
    b'{"instances": [{"b64": 1}]}',
    400,
    "JSON object: does not have named input: b64",
  ),
  (
    "IsValBase64Object",
    NAME,
    b'{"instances": [{"b64": "a", "c": "d"}]}',
    400,
    "JSON object: does not have named input: b64",
  ),
]


@pytest.mark.parametrize(
  "test,model,body,status,message",
  PREDICT_ERRORS,
  ids=[f"{c[0]}-{i}" for i, c in enumerate(PREDICT_ERRORS)],
)
def test_predict_errors(ports, test, model, body, status, message):
  code, payload, _ = _request(ports[model], "POST", f"/v1/models/{model}:predict", body)
  assert code == status, payload
  assert message in payload["error"]


# How TF Serving reads a body and writes an answer (util/json_tensor.cc at 9d981c5, line cited):
# (source, model, body, status, substring of the raw answer).
JSON_READING = [
  # ParseJson, l.483-485: kParseStopWhenDoneFlag: text after the first value is not read.
  (
    "json_tensor.cc:485 kParseStopWhenDoneFlag",
    "half_plus_two",
    b'{"instances": [1.0]} trailing, not JSON',
    200,
    '{"predictions": [2.5]}',
  ),
  (
    "json_tensor.cc:485 kParseStopWhenDoneFlag",
    "half_plus_two",
    b'{"instances": [1.0]}{"instances": [2.0]}',
    200,
    '{"predictions": [2.5]}',
  ),
  # kParseNanAndInfFlag (l.484): NaN, Inf, Infinity and negatives are numbers.
  (
    "json_tensor.cc:484 kParseNanAndInfFlag",
    "half_plus_two",
    b'{"instances": [Inf, -Inf, -Infinity, NaN, -NaN]}',
    200,
    '{"predictions": [Infinity,-Infinity,-Infinity,NaN,NaN]}',
  ),
  # No kParseValidateEncodingFlag: bytes that are not UTF-8 reach the model (whose own check
  # refuses them here: TensorFlow's message, not a parse error).
  (
    "json_tensor.cc:483 no kParseValidateEncodingFlag",
    NAME,
    b'{"instances": ["\xff"]}',
    400,
    "Invalid formatting on input string",
  ),
  # rapidjson: kParseErrorNumberTooBig for what a double cannot hold.
  (
    "json_tensor.cc:487 ParseJson error",
    "half_plus_two",
    b'{"instances": [1e400]}',
    400,
    "JSON Parse error: Number too big to be stored in double.",
  ),
  # FindMember (l.508, l.675) returns the first of repeated keys.
  (
    "json_tensor.cc:675 FindMember",
    "half_plus_two",
    b'{"instances": [1.0], "instances": "x"}',
    200,
    '{"predictions": [2.5]}',
  ),
  # WriteDecimal (l.125-170): six digits (absl::StrCat), max_digits10 if they do not
  # round-trip, ".0" on whole numbers without an exponent.
  (
    "json_tensor.cc:139-162 WriteDecimal",
    "half_plus_two",
    b'{"instances": [0.33333334, 0.2, 2.0, -4, 19999996]}',
    200,
    '{"predictions": [2.16666675,2.1,3.0,0.0,1e+07]}',
  ),
  # GetInfoMap (http_rest_api_handler.cc:238): the signature is looked up before tensors.
  (
    "http_rest_api_handler.cc:238 GetInfoMap",
    NAME,
    b'{"signature_name": "nope", "instances": [1]}',
    400,
    'Serving signature name: \\"nope\\" not found in signature def',
  ),
  # :classify on a predict signature, under TF Serving's default flags (no method-name check,
  # server.h:102): its shape is judged (this one has three outputs).
  (
    "classifier.cc:188-192 PreProcessClassification",
    NAME,
    b'{"examples": [{"x": 1}]}',
    400,
    "Expected one or two output Tensors, found 3",
  ),
]


@pytest.mark.parametrize(
  "source,model,body,status,text",
  JSON_READING,
  ids=[f"{c[0]}-{i}" for i, c in enumerate(JSON_READING)],
)
def test_bodies_are_read_and_answers_written_as_tf_serving_does(
  ports, source, model, body, status, text
):
  verb = "classify" if "classif" in source else "predict"
  connection = http.client.HTTPConnection("127.0.0.1", ports[model], timeout=60)
  try:
    connection.request("POST", f"/v1/models/{model}:{verb}", body)
    response = connection.getresponse()
    answer = response.read().decode()
  finally:
    connection.close()
  assert response.status == status, answer
  if status == 200:  # compared without the spaces between values
    text, answer = text.replace(" ", ""), answer.replace(" ", "")
  assert text in answer, answer


@pytest.mark.parametrize(
  "outputs,row_format,message",
  [
    ({"y": np.array([1.0], np.float16)}, True, "Failed to write JSON value for tensor type: half"),
    ({"y": np.array(1.0, np.float32)}, True, "Tensor name: y has no shape information "),
    (
      {"a": np.zeros([2]), "b": np.zeros([3])},
      True,
      "Tensor name: b has inconsistent batch size: 3 expecting: 2",
    ),
    ({}, False, "Cannot convert empty tensor map to JSON"),
  ],
)
def test_answers_tf_serving_cannot_write(outputs, row_format, message):
  """AddSingleValueAndAdvance / MakeRowFormatJsonFromTensors / MakeJsonFromTensors
  (json_tensor.cc:944, 987-994, 1055)."""
  from serving.server.errors import StatusError
  from serving.server.tensor_json import format_predict_response

  with pytest.raises(StatusError) as error:
    format_predict_response(outputs, row_format)
  assert (error.value.code, error.value.message) == ("INVALID_ARGUMENT", message)


def test_unknown_label_is_400(ports):
  """PredictRequestErrors: a nonexistent version label."""
  code, payload, _ = _request(
    ports["half_plus_two"],
    "POST",
    "/v1/models/half_plus_two/labels/nope:predict",
    b'{"instances": [1.0]}',
  )
  assert code == 400 and "Unrecognized servable version label: nope" in payload["error"]


def test_unknown_rank_input_predicts(ports):
  """Predict (http_rest_api_handler_test): half_plus_two's input has unknown rank; rows, a
  version, a label, an explicit signature and columnar inputs all answer."""
  port, path = ports["half_plus_two"], "/v1/models/half_plus_two"
  cases = [
    (
      ":predict",
      {"instances": [[1.0, 2.0], [3.0, 4.0]]},
      {"predictions": [[2.5, 3.0], [3.5, 4.0]]},
    ),
    ("/versions/123:predict", {"instances": [1.0, 2.0]}, {"predictions": [2.5, 3.0]}),
    ("/labels/stable:predict", {"instances": [1.0, 2.0]}, {"predictions": [2.5, 3.0]}),
    (
      "/versions/123:predict",
      {"signature_name": "serving_default", "instances": [3.0, 4.0]},
      {"predictions": [3.5, 4.0]},
    ),
    (
      "/versions/123:predict",
      {"signature_name": "serving_default", "inputs": [3.0, 4.0]},
      {"outputs": [3.5, 4.0]},
    ),
  ]
  for suffix, body, expected in cases:
    code, payload, headers = _request(port, "POST", path + suffix, json.dumps(body))
    assert (code, payload) == (200, expected), suffix
    assert headers["Content-Type"] == "application/json" and "Server" not in headers


def test_tensorflow_error_message_is_kept(ports):
  """ProcessPredictRequest returns the Session's status: its message, not only the framing
  eager execution adds ("Graph execution error:")."""
  code, payload, _ = _request(
    ports["half_plus_two"],
    "POST",
    "/v1/models/half_plus_two:predict",
    b'{"signature_name": "finite", "instances": [NaN]}',
  )
  assert code == 400, payload
  assert "x must be finite" in payload["error"] and "Tensor had NaN values" in payload["error"]
  assert not payload["error"].startswith("Graph execution error")


def test_named_object_rows_empty_signature_name_and_unpadded_base64(ports):
  """FillTensorMapFromInstancesList takes objects for one input too; FillSignature/GetInfoMap:
  "signature_name": "" is serving_default; absl::Base64Unescape takes unpadded base64
  (SingleUnnamedTensorBase64Scalars uses padded; the padding is optional)."""
  port = ports[NAME]
  path = f"/v1/models/{NAME}:predict"
  expected = _request(port, "POST", path, b'{"instances": ["12"]}')[1]["predictions"]
  for body in (
    b'{"instances": [{"text": "12"}]}',
    b'{"signature_name": "", "instances": ["12"]}',
    b'{"instances": [{"b64": "MTI"}]}',
    b'{"instances": [{"text": {"b64": "MTI="}}]}',
  ):
    code, payload, _ = _request(port, "POST", path, body)
    assert code == 200, payload
    assert payload["predictions"][0]["translation"] == expected[0]["translation"]
    assert payload["predictions"][0]["score"] == pytest.approx(expected[0]["score"], abs=1e-4)


def test_chunked_body_and_keep_alive(ports):
  """evhttp reads chunked bodies (ReadRequestBytes); the next request on the connection is
  answered in step."""
  connection = http.client.HTTPConnection("127.0.0.1", ports[NAME], timeout=60)
  try:
    chunks = iter([b'{"instances"', b': ["12", ', b'"345"]}'])
    connection.request(
      "POST",
      f"/v1/models/{NAME}:predict",
      body=chunks,
      headers={"Transfer-Encoding": "chunked"},
      encode_chunked=True,
    )
    response = connection.getresponse()
    payload = json.loads(response.read())
    assert response.status == 200 and len(payload["predictions"]) == 2
    code, payload, _ = _request(None, "GET", f"/v1/models/{NAME}", connection=connection)
    assert code == 200 and payload["model_version_status"][0]["state"] == "AVAILABLE"
  finally:
    connection.close()


def test_status_ignores_a_label(ports):
  """GetStatus / GetModelStatusWithModelSpec: the status URL with /labels/L lists the model's
  versions as the bare URL does (the spec's label is not consulted), even an unknown label."""
  port = ports["half_plus_two"]
  bare = _request(port, "GET", "/v1/models/half_plus_two")
  assert bare[0] == 200
  for label in ("stable", "unknown"):
    assert _request(port, "GET", f"/v1/models/half_plus_two/labels/{label}")[:2] == bare[:2]


def test_status_reports_loading_while_a_version_warms_up(exported, monkeypatch):
  """ServableStateMonitor states: LOADING until the warm-up is done, then AVAILABLE; END after
  unload, kept in the listing (get_model_status_impl.cc)."""
  base, _ = exported
  release = threading.Event()
  warm_up = model_manager.Servable.warm_up
  monkeypatch.setattr(
    model_manager.Servable, "warm_up", lambda self: release.wait(60) and warm_up(self)
  )
  manager = ModelManager(NAME, str(base))
  loader = threading.Thread(target=manager.poll_once)
  loader.start()
  deadline = time.time() + 60
  while time.time() < deadline:
    try:
      states = manager.status()["model_version_status"]
      break
    except Exception:
      time.sleep(0.05)
  assert [(s["version"], s["state"]) for s in states] == [("1", "LOADING")]
  release.set()
  loader.join()
  assert manager.status(1)["model_version_status"][0]["state"] == "AVAILABLE"
  manager.policy, manager.versions = "specific", {99}  # now nothing wanted: 1 is unloaded
  manager.poll_once()
  assert manager.status(1)["model_version_status"][0]["state"] == "END"


@pytest.mark.parametrize(
  "dtype,values,expected",
  [
    # AddValueToTensor: int8/int16/uint8 take any int32 (IsInt) and the proto copy wraps.
    (tf.uint8, [256, -1, 7], [0, 255, 7]),
    (tf.int8, [128, -129], [-128, 127]),
    (tf.int32, [2**31 - 1, -(2**31)], [2**31 - 1, -(2**31)]),
    (tf.int64, [2**63 - 1], [2**63 - 1]),
    # FloatTensorThatExceedsMaxReturnsInf: a float input takes any number.
    (tf.float32, [1e300, 10**20, 1], [float("inf"), 1e20, 1.0]),
  ],
)
def test_json_numbers_into_tensors(dtype, values, expected):
  from serving.server.tensor_json import to_array

  assert to_array(values, dtype).tolist() == pytest.approx(expected)


@pytest.mark.parametrize(
  "dtype,value",
  [
    (tf.int32, 2**31),
    (tf.uint8, 2**31),
    (tf.int64, 2**63),
    (tf.int32, 1.0),
    (tf.int32, True),
    (tf.float32, "1"),
  ],
)
def test_json_numbers_that_do_not_fit_are_type_errors(dtype, value):
  """AddValueToTensor (MixedInputForFloatTensor & co.): IsInt/IsInt64/IsNumber decide."""
  from serving.server.errors import StatusError
  from serving.server.tensor_json import to_array

  with pytest.raises(StatusError, match="is not of expected type") as error:
    to_array([value], dtype)
  assert error.value.http_status == 400


@pytest.mark.parametrize(
  "body,message",
  [
    (b'{"instances": ["\\ud800"]}', None),  # parsed; refused when made a string tensor
    (b"1" * 5000, "Number too big"),  # as rapidjson; and no quadratic int() of 5000 digits
    # Our own guard, before Python's recursive parser: the same answer on every Python.
    (b"[" * 5000 + b"]" * 5000, "nested too deeply \\(more than 258 levels\\) at offset: 258"),
    (b'{"instances": ' + b"[" * 300 + b"]" * 300 + b"}", "nested too deeply"),
    (b"\xff", "Invalid value"),
    # json_tensor.cc:480-482: a UTF-8 stream, whose byte order mark is skipped (offsets count it).
    (b"\xef\xbb\xbf", "The document is empty. at offset: 3"),
    (b"\xef\xbb\xbf{x", "Missing a name for object member. at offset: 4"),
  ],
)
def test_json_parsing_limits(body, message):
  from serving.server.errors import StatusError
  from serving.server.tensor_json import parse_json, to_array

  if message is None:
    with pytest.raises(StatusError, match="surrogate"):
      to_array(parse_json(body)["instances"], tf.string)
    return
  with pytest.raises(StatusError, match=message):
    parse_json(body)


def test_a_byte_order_mark_is_skipped_and_nesting_up_to_the_limit_is_read():
  from serving.server.tensor_json import MAX_JSON_DEPTH, parse_json

  assert parse_json(b'\xef\xbb\xbf{"instances": [1]}') == {"instances": [1]}
  deepest = b'{"a": ' + b"[" * (MAX_JSON_DEPTH - 1) + b"]" * (MAX_JSON_DEPTH - 1) + b"}"
  value, depth = parse_json(deepest), 0
  while value:
    value, depth = next(iter(value.values())) if isinstance(value, dict) else value[0], depth + 1
  assert depth == MAX_JSON_DEPTH - 1  # the object, then MAX_JSON_DEPTH - 1 arrays (the last empty)
  assert parse_json(b'{"s": "' + b"[" * 1000 + b'"}')["s"] == "[" * 1000  # brackets in text
