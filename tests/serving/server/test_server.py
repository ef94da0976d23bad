"""The TF-Serving-compatible REST server: API shapes, every error case, version lifecycle,
batching. The server runs in-process on a loopback port."""

import base64
import concurrent.futures
import gzip
import json
import os
import shutil
import socket
import threading
import urllib.request

import pytest

from serving import export
from serving.server.batching import Batcher, BatchingParameters
from serving.server.launch import start_subprocess
from serving.server.model_manager import ModelManager
from serving.server.rest_api import make_server
from serving.server.server_core import ServerCore
from serving.tools.client import ServingClient, ServingError
from tfattn.decode_options import DecodeOptions

import warm_start
from train_helpers import assert_same_answers_but_a_near_tie, poll_until, server_has_read

NAME = "numbers"
GREEDY = DecodeOptions(strategy="greedy")


def _start(base, batcher=None, max_body_bytes=1 << 20, poll_seconds=0.2):
  manager = ModelManager(NAME, str(base), poll_seconds=poll_seconds)
  core = ServerCore([manager], batcher=batcher)
  core.start()
  server = make_server(core, "127.0.0.1", 0, max_body_bytes=max_body_bytes)
  thread = threading.Thread(target=server.serve_forever, daemon=True)
  thread.start()
  return manager, server


@pytest.fixture(scope="module")
def served(exported):
  base, _ = exported
  manager, server = _start(base)
  yield ServingClient(NAME, port=server.server_address[1]), server.server_address[1]
  server.shutdown()
  manager.stop()


def _raw(port, method, path, body=None, headers=None):
  """(status, decoded JSON body, content type) of a raw HTTP request."""
  request = urllib.request.Request(
    f"http://127.0.0.1:{port}{path}", data=body, method=method, headers=headers or {}
  )
  try:
    with urllib.request.urlopen(request, timeout=60) as response:
      return response.status, json.loads(response.read()), response.headers["Content-Type"]
  except urllib.error.HTTPError as error:
    return error.code, json.loads(error.read()), error.headers["Content-Type"]


def test_status_and_metadata(served):
  client, _ = served
  assert client.status() == {
    "model_version_status": [
      {"version": "1", "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}}
    ]
  }
  assert client.status(version=1)["model_version_status"][0]["version"] == "1"
  metadata = client.metadata()
  assert metadata["model_spec"] == {"name": NAME, "signature_name": "", "version": "1"}
  signature = metadata["metadata"]["signature_def"]["signature_def"]["serving_default"]
  assert signature["method_name"] == "tensorflow/serving/predict"
  text_input = signature["inputs"]["text"]
  assert text_input["dtype"] == "DT_STRING"
  assert text_input["tensor_shape"] == {"dim": [{"size": "-1", "name": ""}], "unknown_rank": False}
  assert set(signature["outputs"]) == {"translation", "score", "log_prob"}


def test_row_and_columnar_predict_agree(served):
  client, _ = served
  rows = client.predict(instances=["12", "345"])["predictions"]
  assert [set(r) for r in rows] == [{"translation", "score", "log_prob"}] * 2
  columns = client.predict(inputs={"text": ["12", "345"]})["outputs"]
  assert columns["translation"] == [r["translation"] for r in rows]
  assert columns["score"] == [r["score"] for r in rows]  # the same batch: the same numbers
  # A batch of one is a different computation (shapes, padding): scores agree to rounding.
  alone = client.predict(inputs=["12"])["outputs"]
  assert alone["translation"] == [rows[0]["translation"]]
  assert alone["score"] == pytest.approx([rows[0]["score"]], rel=1e-4, abs=1e-4)
  b64 = {"b64": base64.b64encode(b"345").decode()}
  alone = client.predict(instances=[b64])["predictions"][0]
  assert alone["translation"] == rows[1]["translation"]
  assert alone["score"] == pytest.approx(rows[1]["score"], rel=1e-4, abs=1e-4)


def test_token_level_signatures(served):
  client, _ = served
  sources = [[5, 6, 7], [8, 9, 0]]
  found = client.predict(instances=sources, signature_name="translate_ids")["predictions"]
  assert isinstance(found[0]["ids"][0], int) and isinstance(found[0]["score"], float)
  # score(source, translate_ids(source)) is the log-probability the search reported.
  scored = client.predict(
    signature_name="score",
    instances=[{"source_ids": s, "target_ids": f["ids"]} for s, f in zip(sources, found)],
  )["predictions"]
  assert all(f["log_prob"] < 0 for f in found)
  assert scored == pytest.approx([f["log_prob"] for f in found], rel=1e-4, abs=1e-4)
  other = client.predict(
    signature_name="score", instances=[{"source_ids": [5, 6, 7], "target_ids": [7, 2]}]
  )["predictions"]
  assert abs(other[0] - found[0]["log_prob"]) > 1e-2  # another target scores otherwise
  encoded = client.predict(signature_name="encode", inputs=[[5, 6, 0]])["outputs"]
  assert len(encoded[0]) == 3 and len(encoded[0][0]) == 32


def test_version_and_label_urls(served):
  client, _ = served
  assert client.predict(instances=["7"], version=1)["predictions"]
  with pytest.raises(ServingError) as error:
    client.predict(instances=["7"], version=9)
  assert error.value.status == 404 and "Specific(numbers, 9)" in error.value.message
  with pytest.raises(ServingError) as error:
    client.predict(instances=["7"], label="canary")
  assert error.value.status == 400


@pytest.mark.parametrize(
  "method,path,body,status,message",
  [
    ("GET", "/v1/models", None, 400, "Missing model name in request."),
    ("GET", "/v1/models/other", None, 404, "other"),
    ("GET", "/v1/models/numbers/versions/7", None, 404, "Could not find version 7"),
    ("GET", "/v1/models/numbers/versions/x", None, 400, "Malformed request: GET"),
    ("GET", "/v2/models/numbers", None, 404, "Not found"),  # TF Serving: no handler, 404
    ("POST", "/v1/models/numbers:predict", b"{not json", 400, "JSON Parse error"),
    ("POST", "/v1/models/numbers:predict", b'["x"]', 400, "Is not object"),
    (
      "POST",
      "/v1/models/numbers:predict",
      b'{"instances": ["1"], "inputs": ["1"]}',
      400,
      "Not formatted correctly expecting only one of 'inputs' or 'instances' keys",
    ),
    (
      "POST",
      "/v1/models/numbers:predict",
      b'{"signature_name": "serving_default"}',
      400,
      "Missing 'inputs' or 'instances' key",
    ),
    (
      "POST",
      "/v1/models/numbers:predict",
      b'{"instances": []}',
      400,
      "No values in 'instances' array",
    ),
    (
      "POST",
      "/v1/models/numbers:predict",
      b'{"instances": [1]}',
      400,
      "is not of expected type: string",
    ),
    (
      "POST",
      "/v1/models/numbers:predict",
      b'{"instances": [["a", "b"], ["c"]]}',
      400,
      "Expecting tensor size: 2 but got: 1",
    ),
    (
      "POST",
      "/v1/models/numbers:predict",
      b'{"instances": ["a", ["b"]]}',
      400,
      "Expecting shape [] but got: [1]",
    ),
    (
      "POST",
      "/v1/models/numbers:predict",
      b'{"inputs": ["a", ["b"]]}',
      400,
      "Encountered list at unexpected level: 1 expected < 1",
    ),
    (
      "POST",
      "/v1/models/numbers:predict",
      b'{"inputs": [["a"], "b"]}',
      400,
      "found at incorrect level: 2 in the JSON DOM. Expected at level: 2",
    ),
    (
      "POST",
      "/v1/models/numbers:predict",
      b'{"inputs": [["a", "b"], ["c"]]}',
      400,
      "Encountered list at unexpected size",
    ),
    (
      "POST",
      "/v1/models/numbers:predict",
      b'{"instances": [{"b64": "***"}]}',
      400,
      "Unable to base64 decode",
    ),
    (
      "POST",
      "/v1/models/numbers:predict",
      b'{"instances": ["1"], "signature_name": "x"}',
      400,
      'Serving signature name: "x" not found in signature def',
    ),
    (
      "POST",
      "/v1/models/numbers:predict",
      b'{"signature_name": "translate_ids", "instances": [[1.0, 2]]}',
      400,
      "is not of expected type: int32",
    ),
    (
      "POST",
      "/v1/models/numbers:predict",
      b'{"signature_name": "translate_ids", "instances": [[99999999999]]}',
      400,
      "is not of expected type: int32",
    ),
    # Token ids are checked inside the signatures (an XLA gather would clamp them silently).
    (
      "POST",
      "/v1/models/numbers:predict",
      b'{"signature_name": "translate_ids", "instances": [[5, 5000]]}',
      400,
      "source_ids holds a token id >= the vocabulary size",
    ),
    (
      "POST",
      "/v1/models/numbers:predict",
      b'{"signature_name": "translate_ids", "instances": [[5, -1]]}',
      400,
      "source_ids holds a negative token id",
    ),
    (
      "POST",
      "/v1/models/numbers:predict",
      b'{"signature_name": "translate_ids", "instances": [[' + b", ".join([b"5"] * 25) + b"]]}",
      400,
      "source_ids has more tokens than max_length=24",
    ),
    (
      "POST",
      "/v1/models/numbers:predict",
      b'{"signature_name": "score", "instances": [{"source_ids": [5], "target_ids": [5000]}]}',
      400,
      "target_ids holds a token id >= the vocabulary size",
    ),
    (
      "POST",
      "/v1/models/numbers:predict",
      b'{"signature_name": "encode", "instances": [[5000]]}',
      400,
      "source_ids holds a token id >= the vocabulary size",
    ),
    (
      "POST",
      "/v1/models/numbers:predict",
      b'{"signature_name": "score", "inputs": {"source_ids": [[1]]}}',
      400,
      "Missing named input: target_ids in 'inputs' object.",
    ),
    ("POST", "/v1/models/numbers:predict", b'{"instances": [["nested"]]}', 400, "(rank 1)"),
    # Not UTF-8: passed to the model as bytes (rapidjson does not validate), whose own check
    # refuses them.
    (
      "POST",
      "/v1/models/numbers:predict",
      b'{"instances": ["\xff\xfe"]}',
      400,
      "Invalid formatting on input string",
    ),
    ("POST", "/v1/models/numbers:predict", b'{"instances": [{"b64": "//4="}]}', 400, ""),
    (
      "POST",
      "/v1/models/numbers:classify",
      b'{"examples": [{"x": 1}]}',
      400,
      "Expected one or two output Tensors, found 3",
    ),
    (
      "POST",
      "/v1/models/nope:predict",
      b'{"instances": ["1"]}',
      404,
      "Servable not found for request: Latest(nope)",
    ),
  ],
)
def test_errors_are_json_with_tf_serving_status_codes(served, method, path, body, status, message):
  _, port = served
  code, payload, content_type = _raw(port, method, path, body)
  assert code == status, payload
  assert content_type == "application/json"
  assert set(payload) == {"error"} and message in payload["error"]
  # ... and the server still answers correctly afterwards.
  assert _raw(port, "POST", "/v1/models/numbers:predict", b'{"instances": ["12"]}')[0] == 200


def test_body_size_cap_and_gzip(served):
  client, port = served
  code, payload, _ = _raw(
    port, "POST", "/v1/models/numbers:predict", b'{"instances": ["' + b"1" * (2 << 20) + b'"]}'
  )
  assert code == 413, payload
  assert "exceeds" in payload["error"]
  body = gzip.compress(b'{"instances": ["12"]}')
  code, payload, _ = _raw(
    port, "POST", "/v1/models/numbers:predict", body, {"Content-Encoding": "gzip"}
  )
  assert code == 200 and payload == client.predict(instances=["12"])


def test_empty_and_very_long_strings_are_answered(served):
  client, _ = served
  rows = client.predict(instances=["", "9" * 5000, "hello, wörld!"])["predictions"]
  assert len(rows) == 3 and all(isinstance(r["translation"], str) for r in rows)


def test_path_prefix_is_case_insensitive_and_names_url_decoded(served):
  _, port = served
  assert _raw(port, "GET", "/V1/models/numbers")[0] == 200
  assert _raw(port, "GET", "/v1/models/%6Eumbers")[0] == 200


@pytest.mark.slow
def test_new_versions_are_picked_up_and_half_written_ones_ignored(trained_run, exported, tmp_path):
  base = tmp_path / "base"
  # Version 1: a copy of the session's greedy export of the same run (an export less); version
  # 2 below is exported into the served base while requests flow.
  shutil.copytree(exported[1], base / "1")
  manager, server = _start(base)
  client = ServingClient(NAME, port=server.server_address[1])
  try:
    client.wait_until_available()
    # Half-written versions: variables without saved_model.pb, and a corrupt saved_model.pb.
    os.makedirs(base / "5" / "variables")
    os.makedirs(base / "6")
    (base / "6" / "saved_model.pb").write_bytes(b"truncated")
    # Version 6 failed to load: listed as END with its error (TF Serving's state monitor);
    # version 1 keeps serving. Versions 5 and 6 were written before the poll that saw 6.
    states = poll_until(
      lambda: (
        {s["version"]: s for s in client.status()["model_version_status"]}
        if any(s["version"] == "6" for s in client.status()["model_version_status"])
        else None
      ),
      "version 6 listed",
    )
    assert set(states) == {"6", "1"} and states["1"]["state"] == "AVAILABLE"
    assert states["6"]["state"] == "END" and states["6"]["status"]["error_code"] != "OK"
    assert client.predict(instances=["12"])["predictions"]

    shutil.rmtree(base / "5")
    shutil.rmtree(base / "6")
    stop, written, failures, answered = threading.Event(), threading.Event(), [], [0]

    def hammer():  # requests keep flowing while version 2 is written and replaces version 1
      while not stop.is_set():
        try:
          client.predict(instances=["12"])
          answered[0] += 1
        except Exception as error:
          failures.append(error)
        # A trickle while the export beside it shares this process's cores (a stream every
        # 20 ms made the export cost 3x its own CPU time: 13 vs 4 s); from when version 2 is
        # written, across its load and the switch, a steady stream, not a flood.
        if written.is_set():
          stop.wait(0.02)
        else:
          written.wait(0.5)

    threads = [threading.Thread(target=hammer) for _ in range(3)]
    for thread in threads:
      thread.start()
    export.export(str(trained_run), str(base), options=GREEDY)
    written.set()

    def versions_once_1_ended():
      found = {s["version"]: s["state"] for s in client.status()["model_version_status"]}
      return found if found.get("1") == "END" else None

    versions = poll_until(versions_once_1_ended, "version 1 unloaded")
    after_switch = answered[0]
    poll_until(lambda: answered[0] >= after_switch + 5, "5 answers after the switch")
    stop.set()
    for thread in threads:
      thread.join()
    # Unloaded versions stay listed as END, newest first, like TF Serving's status.
    assert versions == {"6": "END", "2": "AVAILABLE", "1": "END"}
    assert [s["version"] for s in client.status()["model_version_status"]] == ["6", "2", "1"]
    assert client.status(version=1)["model_version_status"][0]["state"] == "END"
    assert not failures and answered[0] > 0
    with pytest.raises(ServingError) as error:
      client.predict(instances=["12"], version=1)
    assert error.value.status == 404
  finally:
    server.shutdown()
    manager.stop()


def test_batching_merges_concurrent_requests_with_identical_answers(exported):
  base, _ = exported
  params = BatchingParameters(
    max_batch_size=8, batch_timeout_micros=20_000, num_batch_threads=1, allowed_batch_sizes=(4, 8)
  )
  batcher = Batcher(params)
  manager, server = _start(base, batcher=batcher)
  client = ServingClient(NAME, port=server.server_address[1])
  texts = [str(n) for n in range(1, 17)]
  try:
    expected = client.predict(instances=texts)["predictions"]
    calls = []
    original = manager.servable().run
    manager.servable().run = lambda *a: calls.append(len(a[1]["text"])) or original(*a)
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
      answers = list(pool.map(lambda t: client.predict(instances=[t])["predictions"][0], texts))
    assert [a["translation"] for a in answers] == [e["translation"] for e in expected]
    for got, want in zip(answers, expected):
      assert got["score"] == pytest.approx(want["score"], abs=1e-4)
    assert len(calls) < len(texts)  # requests were merged
    assert set(calls) <= {4, 8}  # and padded to allowed sizes
  finally:
    server.shutdown()
    manager.stop()
    batcher.close()


def test_batching_parameters_file_format():
  params = BatchingParameters.from_text_proto("""
      max_batch_size { value: 16 }
      batch_timeout_micros { value: 500 }
      num_batch_threads { value: 2 }
      allowed_batch_sizes: 4
      allowed_batch_sizes: 16
      pad_variable_length_inputs: true
      thread_pool_name { value: "model_server_batch_threads" }
      max_execution_batch_size { value: 16 }""")
  assert (
    params.max_batch_size,
    params.batch_timeout_micros,
    params.num_batch_threads,
    params.allowed_batch_sizes,
    params.pad_variable_length_inputs,
  ) == (16, 500, 2, (4, 16), True)
  assert BatchingParameters.from_text_proto("") == BatchingParameters()  # unset: defaults
  with pytest.raises(ValueError, match='has no field named "max_batch_sise"'):
    BatchingParameters.from_text_proto("max_batch_sise { value: 1 }")
  with pytest.raises(ValueError, match="largest allowed_batch_sizes entry"):
    BatchingParameters.from_text_proto("max_batch_size { value: 8 } allowed_batch_sizes: 4")
  with pytest.raises(ValueError, match="num_batch_threads must be at least 1"):
    BatchingParameters.from_text_proto("num_batch_threads { value: 0 }")


@pytest.mark.slow
def test_an_xla_export_serves_the_graph_exports_answers(xla_exported, served):
  """The XLA export (warmed up per length bucket before it is AVAILABLE) answers REST requests
  as the graph export of the same weights does."""
  graph_client, _ = served
  base, path = xla_exported
  manager, server = _start(base)
  client = ServingClient(NAME, port=server.server_address[1])
  try:
    client.wait_until_available()
    assert manager.servable().path == path
    texts = ["12", "345", "9" * 40, ""]
    rows = client.predict(instances=texts)["predictions"]
    expected = graph_client.predict(instances=texts)["predictions"]
    assert_same_answers_but_a_near_tie(
      [(r["translation"], r["score"]) for r in rows],
      [(r["translation"], r["score"]) for r in expected],
      atol=1e-3,  # scores of 40-piece outputs: sums of many float32 terms
    )
  finally:
    server.shutdown()
    manager.stop()


@pytest.mark.slow  # runs the server in a subprocess
def test_server_command_line_and_sigterm_lets_requests_in_flight_finish(exported, tmp_path):
  """`python -m serving.server --enable_batching ...` starts, names the model's URL and answers
  (one server start for both checks); graceful shutdown: a request held in the batching queue
  when SIGTERM arrives is still answered, then the server exits 0."""
  base, _ = exported
  config = tmp_path / "batching.config"
  config.write_text(
    "max_batch_size { value: 64 }\nbatch_timeout_micros { value: 3000000 }\n"
    "num_batch_threads { value: 1 }\n"
  )
  process, ports = start_subprocess(
    NAME,
    str(base),
    extra_flags=["--enable_batching", f"--batching_parameters_file={config}"],
    python=warm_start.python(),
    env=warm_start.environment(),
  )
  port = ports.rest
  try:
    client = ServingClient(NAME, port=port)
    client.wait_until_available()
    # The start-up line names the model's own URL (it once printed a literal .../NAME).
    assert f"REST at http://127.0.0.1:{port}/v1/models/{NAME}, gRPC at" in process.log_tail()
    body = json.dumps({"instances": ["12"]}).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
      sock.sendall(
        f"POST /v1/models/{NAME}:predict HTTP/1.1\r\nHost: x\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
      )
      # Read whole by the server: the request now waits up to 3 s for batch-mates.
      poll_until(lambda: server_has_read(port, sock), "the request read by the server")
      process.terminate()
      answer = b""
      while chunk := sock.recv(65536):
        answer += chunk
    head, _, answer_body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), answer[:2000]
    # Answered (a non-empty translation), by a server started with --enable_batching.
    assert json.loads(answer_body)["predictions"][0]["translation"]
    assert process.wait(timeout=30) == 0
  finally:
    process.kill()
    process.wait()
