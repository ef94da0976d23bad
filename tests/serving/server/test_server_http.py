"""serving.server.http_server under clients that try to lock others out (issue 34): stalled
connections cannot exhaust the connection limit, and the read timeout bounds a whole request
however slowly it trickles. Loopback only; every loop is bounded and stops by itself."""

import importlib.metadata
import json
import socket
import threading
import time

import pytest
import waitress.channel
import waitress.task
from test_server_conformance import _half_plus_two

from serving.server import http_server
from serving.server.model_manager import ModelManager
from serving.server.rest_api import make_server
from serving.server.server_core import ServerCore

from train_helpers import poll_until

NAME = "half_plus_two"
READ_TIMEOUT = 2  # seconds


def _read_response(sock):
  """One whole HTTP response (headers, then Content-Length bytes of body): the body may come in
  a segment of its own."""
  data = b""
  while b"\r\n\r\n" not in data:
    chunk = sock.recv(65536)
    assert chunk, f"connection closed mid-response: {data!r}"
    data += chunk
  head, _, body = data.partition(b"\r\n\r\n")
  length = next(
    int(line.split(b":", 1)[1])
    for line in head.split(b"\r\n")
    if line.lower().startswith(b"content-length:")
  )
  while len(body) < length:
    chunk = sock.recv(65536)
    assert chunk, "connection closed mid-body"
    body += chunk
  return head + b"\r\n\r\n" + body


@pytest.fixture(scope="module")
def core(tmp_path_factory):
  core = ServerCore([ModelManager(NAME, str(_half_plus_two(tmp_path_factory.mktemp("hp2"))))])
  core.start()
  yield core
  core.stop()


@pytest.fixture
def serve(core):
  """serve(**make_server options) -> a running server (its `server_address`); stopped after
  the test. The read timeout is READ_TIMEOUT unless given."""
  servers = []

  def start(**options):
    options.setdefault("read_timeout_seconds", READ_TIMEOUT)
    server = make_server(core, "127.0.0.1", 0, **options)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    servers.append(server)
    return server

  yield start
  for server in servers:
    server.shutdown(0)


def _status_within(address, seconds):
  """A new client's GET of the model's status: (HTTP status line, JSON body), or fails when
  the answer takes longer than `seconds`."""
  started = time.monotonic()
  with socket.create_connection(address, timeout=seconds) as sock:
    sock.sendall(f"GET /v1/models/{NAME} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
    answer = b""
    while chunk := sock.recv(65536):
      answer += chunk
  elapsed = time.monotonic() - started
  assert elapsed < seconds, elapsed
  head, _, body = answer.partition(b"\r\n\r\n")
  return head.split(b"\r\n")[0].decode(), json.loads(body)


def _stalled(address, count):
  """`count` connections that never finish a request: half send nothing, half stop in their
  headers."""
  sockets = []
  for index in range(count):
    sock = socket.create_connection(address, timeout=10)
    if index % 2:
      sock.sendall(f"POST /v1/models/{NAME}:predict HTTP/1.1\r\nHost: x\r\n".encode())
    sockets.append(sock)
  return sockets


def _closed_by_server(sock, seconds):
  """Whether the server closes `sock` (EOF or reset) within `seconds`, sending no answer."""
  sock.settimeout(seconds)
  try:
    return sock.recv(1024) == b""
  except ConnectionResetError:
    return True
  except TimeoutError:
    return False


def _accepted(server, count):
  """Waits until the server holds `count` connections."""
  poll_until(lambda: len(server._server.active_channels) >= count, f"{count} connections")


# A stalled connection is held for the read timeout: with 30 s, a new client locked out behind
# them waits ~30 s, while one answered at once takes milliseconds (10 s: a loaded machine's
# margin).
STALL_TIMEOUT, ANSWER_WITHIN = 30, 10.0


def test_200_stalled_clients_do_not_delay_a_new_one(serve):
  """waitress's default limit (100) once let 100 stalled sockets lock everyone out for the
  whole read timeout; the default limit follows the file limit."""
  server = serve(read_timeout_seconds=STALL_TIMEOUT)
  address = server.server_address
  stalled = _stalled(address, 200)
  try:
    # All 200 held (the default limit follows the file limit), or as many as a low limit holds.
    _accepted(server, min(200, http_server.default_connection_limit()))
    status, body = _status_within(address, ANSWER_WITHIN)
    assert status == "HTTP/1.1 200 OK" and body["model_version_status"][0]["state"] == "AVAILABLE"
  finally:
    for sock in stalled:
      sock.close()


def test_at_the_connection_limit_the_stalest_idle_connection_makes_room(serve):
  server = serve(connection_limit=20, read_timeout_seconds=STALL_TIMEOUT)
  address = server.server_address
  stalled = _stalled(address, 50)
  try:
    # The server closes the oldest as new ones come: it holds its limit (20) and no more.
    poll_until(lambda: _closed_by_server(stalled[0], 1.0), "the oldest connection closed")
    for _ in range(3):  # again and again: each new client is answered at once
      assert _status_within(address, ANSWER_WITHIN)[0] == "HTTP/1.1 200 OK"
    assert not _closed_by_server(stalled[-1], 1.0)  # the newest is still held
  finally:
    for sock in stalled:
      sock.close()


@pytest.mark.slow  # waits out a timeout: seconds of waiting, kept out of test-fast
def test_a_trickling_client_is_closed_within_the_read_timeout_plus_5_s(serve):
  """A byte every 0.25 s keeps a connection from ever being silent; the request must still
  arrive whole within the read timeout of its first byte. (The request would take 250 s to
  trickle whole; 5 s over the timeout is a loaded machine's margin.)"""
  address = serve().server_address
  request = f"GET /v1/models/{NAME} HTTP/1.1\r\nHost: x\r\n" + "X-Pad: " + "a" * 1000
  sock = socket.create_connection(address, timeout=10)
  started = time.monotonic()
  closed_after = None
  try:
    for byte in request.encode():  # bounded: the request is longer than the timeout allows
      try:
        sock.sendall(bytes([byte]))
      except (BrokenPipeError, ConnectionResetError):
        closed_after = time.monotonic() - started
        break
      if _closed_by_server(sock, 0.25):
        closed_after = time.monotonic() - started
        break
      assert time.monotonic() - started < READ_TIMEOUT + 10, "never closed"
  finally:
    sock.close()
  assert closed_after is not None and READ_TIMEOUT - 0.1 <= closed_after <= READ_TIMEOUT + 5


@pytest.mark.slow  # waits out a timeout: seconds of waiting, kept out of test-fast
def test_a_request_that_arrives_in_time_is_answered_however_it_is_split(serve):
  """Two requests on one connection, each sent in three pieces 1.1 s apart: each arrives whole
  2.2 s after its own first byte (1.8 s inside a 4 s read timeout), the second 4.4 s after the
  connection's first byte, so the timeout's clock starts afresh with each request. The pauses
  are the subject of the test: they only ever run long, which moves the second request further
  past 4 s, never the other way."""
  address = serve(read_timeout_seconds=4).server_address
  with socket.create_connection(address, timeout=10) as sock:
    for _ in range(2):
      for piece in (b"GET /v1/mod", f"els/{NAME} HTTP/1.1\r\n".encode()):
        sock.sendall(piece)
        time.sleep(1.1)
      sock.sendall(b"Host: x\r\n\r\n")
      assert _read_response(sock).startswith(b"HTTP/1.1 200 OK")


def test_an_idle_server_waits_in_its_poll_rather_than_spinning(core):
  """waitress takes its loop timeout in whole seconds (its Adjustments cast it with int): 0.5
  became 0, a loop that polled without waiting and kept a core busy while the server idled,
  with or without a connection open."""
  server = make_server(core, "127.0.0.1", 0, read_timeout_seconds=READ_TIMEOUT)
  loop = threading.Thread(target=server.serve_forever, daemon=True)
  loop.start()
  try:
    with socket.create_connection(server.server_address, timeout=10):  # an idle keep-alive one
      _accepted(server, 1)
      clock = time.pthread_getcpuclockid(loop.ident)
      started = time.clock_gettime(clock)
      time.sleep(0.5)
      used = time.clock_gettime(clock) - started
  finally:
    server.shutdown(0)
  assert used < 0.05, f"the loop thread used {used:.2f} CPU s of 0.5 s idle"


def test_the_waitress_attributes_the_adapter_names_exist_in_the_pinned_version(core):
  assert importlib.metadata.version("waitress") == http_server.CHECKED_WAITRESS
  for name in "execute set_close_on_finish write".split():  # (the rest: set per task)
    assert hasattr(waitress.task.ErrorTask, name), name
  server = make_server(core, "127.0.0.1", 0)
  threading.Thread(target=server.serve_forever, daemon=True).start()
  try:
    inner = server._server
    for name in "channel_class active_channels accepting trigger task_dispatcher close".split():
      assert hasattr(inner, name), name
    for name in "active_count queue shutdown".split():
      assert hasattr(inner.task_dispatcher, name), name
    with socket.create_connection(server.server_address, timeout=10):
      deadline = time.monotonic() + 5
      while not inner.active_channels:
        assert time.monotonic() < deadline
        time.sleep(0.01)
      channel = next(iter(inner.active_channels.values()))
      assert isinstance(channel, waitress.channel.HTTPChannel)
      names = (
        "error_task_class received readable request requests last_activity will_close "
        "total_outbufs_len handle_close server adj"
      )
      for name in names.split():
        assert hasattr(channel, name), name
      assert channel.adj.channel_timeout == 30
  finally:
    server.shutdown(0)
