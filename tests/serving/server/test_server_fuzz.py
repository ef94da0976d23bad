"""Hostile clients against serving.server on loopback (issue 13): well over 1,000 malformed
requests, each answered with a 4xx and a JSON body; the server answers correctly afterwards,
with bounded threads and memory; clients that stop half-way through a body are dropped after
the read timeout. Bounded in time (about 20 s here)."""

import http.client
import json
import random
import socket
import threading
import time
import urllib.parse

import pytest
from test_server_conformance import _half_plus_two

from serving.server.model_manager import ModelManager
from serving.server.rest_api import make_server
from serving.server.server_core import ServerCore

NAME = "numbers"
READ_TIMEOUT = 1  # seconds; --rest_api_read_timeout_seconds in production
MAX_BODY = 1 << 20


@pytest.fixture(scope="module")
def server(exported, tmp_path_factory):
  """(numbers port, half_plus_two port): two servers with a 1 s read timeout."""
  base, _ = exported
  running = []
  for name, path in (
    (NAME, str(base)),
    ("half_plus_two", str(_half_plus_two(tmp_path_factory.mktemp("hp2")))),
  ):
    manager = ModelManager(name, path, poll_seconds=0.5)
    core = ServerCore([manager])
    core.start()
    rest = make_server(
      core, "127.0.0.1", 0, max_body_bytes=MAX_BODY, threads=4, read_timeout_seconds=READ_TIMEOUT
    )
    threading.Thread(target=rest.serve_forever, daemon=True).start()
    running.append((manager, rest))
  yield tuple(rest.server_address[1] for _, rest in running)
  for manager, rest in running:
    rest.shutdown(0)
    manager.stop()


def _exchange(port, data, method="GET"):
  """Sends raw bytes on a new connection; returns (status, headers, body) of a well-formed
  HTTP answer (http.client raises on anything else)."""
  with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
    sock.sendall(data)
    response = http.client.HTTPResponse(sock, method=method)
    response.begin()
    return response.status, response.headers, response.read()


def _request_bytes(method, path, body=b"", headers=()):
  lines = [f"{method} {path} HTTP/1.1".encode("latin-1"), b"Host: fuzz"]
  lines += [h.encode("latin-1") if isinstance(h, str) else h for h in headers]
  if body is not None:
    lines.append(f"Content-Length: {len(body)}".encode())
  return b"\r\n".join(lines) + b"\r\n\r\n" + (body or b"")


def _nested(depth):
  """Deep but well-formed requests: TF Serving's iterative parser takes them (an empty tensor
  for an unknown-rank input; an ignored key), so they may succeed; never a 5xx."""
  yield b'{"inputs": ' + b"[" * depth + b"]" * depth + b"}"
  yield b'{"instances": ["1"], "x": ' + b'{"a": ' * depth + b"1" + b"}" * depth + b"}"


def _json_bodies(rng):
  """Malformed predict bodies: truncations, nesting, numbers, strings, types, garbage."""
  valid = b'{"instances": ["12", "345"], "signature_name": "serving_default"}'
  yield from (valid[:i] for i in range(len(valid)))
  for depth in (2, 10, 31, 33, 63, 64, 65, 100, 500, 900, 999, 1000, 1001, 5000, 100_000):
    yield b'{"instances": ' + b"[" * depth + b'"1"' + b"]" * depth + b"}"
    yield b"[" * depth + b"]" * depth
    yield b'{"instances": ' + b"[" * depth  # unterminated
  for number in (
    b"1" * 4300,
    b"1" * 5000,
    b"-" + b"9" * 4301,
    b"1e400",
    b"-1e400",
    b"1.5",
    b"NaN",
    b"Infinity",
    b"2147483648",
    b"-2147483649",
    b"9223372036854775808",
    b"true",
    b"null",
    b'"5"',
    b"{}",
    b"0x10",
    b"01",
    b"1e",
    b"--1",
    b"+1",
  ):
    yield b'{"signature_name": "translate_ids", "instances": [[' + number + b"]]}"
  for text in (
    b'"\\ud800"',
    b'"\\udfff"',
    b'"\\ud800\\u0041"',
    b'"\xff"',
    b'"\xc3"',
    b'"\xe0\x80\x80"',
    b'"\\u00"',
    b'"\\x41"',
    b'"\x00"',
    b'"a\nb"',
    b"'12'",
  ):
    yield b'{"instances": [' + text + b"]}"
    yield b'{"signature_name": ' + text + b', "instances": ["1"]}'
  for b64 in (b'"!!!"', b'"a"', b'"ab=c"', b"5", b"null", b'"===="', b'"\\ud800"'):
    yield b'{"instances": [{"b64": ' + b64 + b"}]}"
  for value in (
    b"{}",
    b"1",
    b'"x"',
    b"null",
    b"true",
    b"[]",
    b'{"text": 1}',
    b'[{"text": "1", "extra": 2}]',
    b'[["1"], "2"]',
  ):
    yield b'{"instances": ' + value + b"}"
    yield b'{"inputs": ' + value + b', "instances": ["1"]}'
  yield from (
    b"null",
    b"1",
    b'"x"',
    b"[]",
    b"{}",
    b"{} trailing",
    b"\xef\xbb\xbf{}",
    b'{"instances": 1} {"instances": ["1"]}',
  )
  alphabet = '{}[]":,0123456789.eE-+ ntruefalsb\\u'
  for _ in range(300):
    yield "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 60))).encode()


def _paths(rng):
  """Malformed or unknown paths for GET and POST."""
  junk = [
    urllib.parse.quote(bytes(rng.randrange(256) for _ in range(rng.randint(1, 20))), safe="")
    for _ in range(60)
  ]
  for j in junk:
    yield f"/v1/models/{j}"
    yield f"/v1/{j}"
  for version in (
    "-1",
    "1.5",
    "0x10",
    str(2**63),
    str(2**64),
    "9" * 400,
    "%31%32",
    "%D9%A3",
    "1/metadata/x",
    "",
    "%",
    "%zz",
    "1%00",
  ):
    yield f"/v1/models/{NAME}/versions/{version}"
    yield f"/v1/models/{NAME}/versions/{version}/metadata"
  for path in (
    "/",
    "*",
    "//",
    "/v1",
    "/v10/models/x",
    "/favicon.ico",
    "/V2/",
    "/v1//models",
    "/v1/models/%",
    "/v1/models/%zz",
    "/v1/models/" + "x" * 10000,
    f"/v1/models/{NAME}/labels/",
    f"/v1/models/{NAME}/metadata/x",
    "/v1/models/:",
  ):
    yield path


def _raw_requests():
  """Requests HTTP parsing must reject, each answered (never dropped, never a non-HTTP
  reply)."""
  ok_head = b"GET /v1/models/numbers HTTP/1.1\r\nHost: x\r\n"
  post = b"POST /v1/models/numbers:predict HTTP/1.1\r\nHost: x\r\n"
  yield from (
    b"GARBAGE\r\n\r\n",
    b"GET\r\n\r\n",
    b"GET / HTTP/1.1 extra\r\n\r\n",
    b"GET /\x00 HTTP/1.1\r\n\r\n",
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",
    b"G\x00T / HTTP/1.1\r\n\r\n",
    b"GET /v1/models/numbers HTTP/x.y\r\n\r\n",
    b"GET  /v1/models/numbers  HTTP/1.1\r\n\r\n",
    b"GET /v1/models/\xff HTTP/1.1\r\n\r\n",
    ok_head + b"Bad Header\r\n\r\n",
    ok_head + b"X: a\rb\r\n\r\n",
    ok_head + b"X\x00: y\r\n\r\n",
    ok_head + b"X: " + b"a" * 300_000 + b"\r\n\r\n",
    post + "Content-Length: \u00b2\r\n\r\n".encode("utf-8"),
    post + b"Content-Length: -1\r\n\r\n",
    post + b"Content-Length: 1e3\r\n\r\n",
    post + b"Content-Length: 0x10\r\n\r\n",
    post + b"Content-Length: 2\r\nContent-Length: 3\r\n\r\nab",
    post + b"Content-Length: 99999999999999999999999\r\n\r\n",
    post + b"Transfer-Encoding: gzip\r\n\r\n",
    post + b"Transfer-Encoding: chunked, gzip\r\n\r\n",
    post + b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n",
    post + b"Transfer-Encoding: chunked\r\n\r\nzz\r\nab\r\n0\r\n\r\n",
    post + b"Transfer-Encoding: chunked\r\n\r\n2\r\nabcd\r\n0\r\n\r\n",
    post + b"Transfer-Encoding: chunked\r\n\r\n2;\x00\r\nab\r\n0\r\n\r\n",
    post + f"Content-Length: {5 * MAX_BODY}\r\n\r\n".encode(),
    post + b"Content-Encoding: gzip\r\nContent-Length: 4\r\n\r\nabcd",
  )


def _deep_requests():
  """[(port index, raw request, method)] of deep, well-formed requests (may be answered 200)."""
  return [
    (index, _request_bytes("POST", f"/v1/models/{model}:predict", body), "POST")
    for depth in (2, 10, 31, 33, 64, 65, 500, 999, 1000, 1001, 5000, 100_000)
    for body in _nested(depth)
    for index, model in ((0, NAME), (1, "half_plus_two"))
  ]


def _corpus(rng):
  """[(port index, raw request bytes, method)]: at least 1,000 malformed requests."""
  requests = []
  for body in _json_bodies(rng):
    for index, model in ((0, NAME), (1, "half_plus_two")):
      requests.append((index, _request_bytes("POST", f"/v1/models/{model}:predict", body), "POST"))
  for path in _paths(rng):
    requests.append((0, _request_bytes("GET", path, None), "GET"))
    requests.append((0, _request_bytes("POST", path + ":predict", b'{"instances": ["1"]}'), "POST"))
  for _ in range(60):  # unknown labels: 400 on predict (the status URL ignores labels)
    label = urllib.parse.quote(
      bytes(rng.randrange(256) for _ in range(rng.randint(1, 20))), safe=""
    )
    requests.append(
      (
        0,
        _request_bytes(
          "POST", f"/v1/models/{NAME}/labels/{label}:predict", b'{"instances": ["1"]}'
        ),
        "POST",
      )
    )
  for method in ("PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "TRACE", "FOO", "get", "post"):
    for path in (f"/v1/models/{NAME}", f"/v1/models/{NAME}:predict", "/v1/models", "/"):
      requests.append((0, _request_bytes(method, path, b"{}"), method))
  requests += [(0, data, "GET") for data in _raw_requests()]
  return requests


def _rss_bytes():
  with open("/proc/self/status") as f:
    for line in f:
      if line.startswith("VmRSS:"):
        return int(line.split()[1]) * 1024
  return 0


def _send_all(ports, corpus, accepted=range(400, 500)):
  """[(request, status, body)] of the answers that were not JSON with an `accepted` status
  (an error body unless 200)."""
  wrong = []
  for index, data, method in corpus:
    try:
      status, headers, body = _exchange(ports[index], data, method)
    except (OSError, http.client.HTTPException) as error:
      wrong.append((data[:120], "no HTTP answer", repr(error)))
      continue
    is_json = headers.get("Content-Type") == "application/json"
    try:
      parsed = json.loads(body) if body else None
    except ValueError:
      parsed = None
    json_ok = is_json and (
      method == "HEAD" or (isinstance(parsed, dict) and (status == 200 or "error" in parsed))
    )
    if not (status in accepted and json_ok):
      wrong.append((data[:150], status, body[:100]))
  return wrong


def _predict(port, texts):
  connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
  try:
    connection.request("POST", f"/v1/models/{NAME}:predict", json.dumps({"instances": texts}))
    response = connection.getresponse()
    return response.status, json.loads(response.read())
  finally:
    connection.close()


def test_malformed_requests_get_4xx_json_and_the_server_stays_well(server):
  rng = random.Random(13)
  corpus = _corpus(rng)
  assert len(corpus) >= 1000
  before = _predict(server[0], ["12", "345"])
  assert before[0] == 200
  started = time.time()
  wrong = _send_all(server, corpus)  # first round: lazy allocations settle
  assert not wrong, f"{len(wrong)} of {len(corpus)} wrong answers, e.g. {wrong[:5]}"
  threads, rss = threading.active_count(), _rss_bytes()
  wrong = _send_all(server, corpus)
  assert not wrong, f"{len(wrong)} of {len(corpus)} wrong answers, e.g. {wrong[:5]}"
  assert threading.active_count() <= threads + 2  # a fixed pool, not a thread per client
  assert _rss_bytes() - rss < 64 << 20  # a second round of the same requests: no leak
  assert time.time() - started < 60
  wrong = _send_all(server, _deep_requests(), accepted=[200, *range(400, 500)])
  assert not wrong, f"deep requests: {wrong[:5]}"
  after = _predict(server[0], ["12", "345"])
  assert after[0] == 200
  got, want = after[1]["predictions"], before[1]["predictions"]
  assert [r["translation"] for r in got] == [r["translation"] for r in want]
  assert [r["score"] for r in got] == pytest.approx([r["score"] for r in want], abs=1e-5)


def test_slow_clients_are_dropped_after_the_read_timeout(server):
  port = server[0]
  threads = threading.active_count()
  slow = []
  for index in range(50):  # headers and half a body (or of a huge chunk), then silence
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    if index % 2:
      sock.sendall(
        _request_bytes("POST", f"/v1/models/{NAME}:predict", None, ["Content-Length: 100"])
        + b'{"instances": '
      )
    else:
      sock.sendall(
        _request_bytes("POST", f"/v1/models/{NAME}:predict", None, ["Transfer-Encoding: chunked"])
        + b"f" * 40
        + b"\r\nab"
      )
    slow.append(sock)
  try:
    # Held connections take no request thread: others are answered meanwhile.
    assert _predict(port, ["12"])[0] == 200
    assert threading.active_count() <= threads + 2
    started = time.time()
    for sock in slow:
      sock.settimeout(READ_TIMEOUT + 10)
      try:
        data = sock.recv(1024)
      except ConnectionResetError:
        data = b""
      assert data == b""  # closed by the server, without an answer to a half request
    assert time.time() - started < READ_TIMEOUT + 5
  finally:
    for sock in slow:
      sock.close()
  assert _predict(port, ["12"])[0] == 200
