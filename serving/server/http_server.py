"""HTTP/1.1 for the REST API: waitress serving a WSGI app on a bound socket, with
http.server's serve_forever()/shutdown(), a graceful shutdown, and limits hostile clients cannot
use to lock others out.

waitress parses HTTP (keep-alive, chunked bodies, the body-size cap) and runs the app on a fixed
pool of threads; a slow client holds a socket, never a thread. Three things are ours:
- **A read timeout that bounds the whole request.** waitress closes a connection silent for
  `channel_timeout` seconds, but a client trickling a byte a second is never silent. Here a
  request must arrive whole within the read timeout of its first byte (TF Serving's evhttp
  closes a connection at its read timeout too); an idle keep-alive connection is closed after
  the same timeout (waitress's own rule).
- **A connection limit that idle clients cannot exhaust.** TF Serving's evhttp sets no limit
  (evhttp_server.cc); waitress's default (100) stops accepting when reached, so 100 stalled
  sockets lock everyone out. The limit here follows the process's file limit, and a connection
  arriving at the limit closes the connection that has been idle (or stalled mid-request)
  longest, so a new client is always answered while any connection is idle.
- **Every answer is JSON**, also to a request waitress cannot parse.

waitress's documented API is create_server()'s adjustments. Beyond them this module uses these
attributes, none underscore-private, checked against waitress == CHECKED_WAITRESS (pinned in
requirements.txt; tests/serving/server/test_server_http.py checks they exist):
  server: channel_class, active_channels, accepting, trigger.pull_trigger(), close(),
          task_dispatcher.active_count / .queue / .shutdown()
  HTTPChannel: error_task_class, received(), readable(), request (the request being read),
          requests (those read, not yet answered), last_activity, will_close,
          total_outbufs_len, handle_close(), server, adj.channel_timeout
  ErrorTask: request.error (.code, .reason, .body), status, response_headers,
          set_close_on_finish(), content_length, write()
"""

import contextlib
import errno
import http
import logging as std_logging
import resource
import socket
import threading
import time

import waitress
import waitress.channel
import waitress.task
import waitress.utilities

from serving.server.errors import error_body

CHECKED_WAITRESS = "3.0.2"

# File descriptors kept free for everything else (model files, gRPC, logs): the connection
# limit is the rest of the process's soft file limit.
_SPARE_FILES = 256
_MIN_CONNECTIONS = 64


def default_connection_limit():
  """Connections held at once: the soft RLIMIT_NOFILE less what the rest of the server needs."""
  soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
  if soft == resource.RLIM_INFINITY:
    soft = 1 << 16
  return max(_MIN_CONNECTIONS, soft - _SPARE_FILES)


def status_line(status):
  """200 -> "200 OK" (499 is TF Serving's "client closed request")."""
  try:
    return f"{status} {http.HTTPStatus(status).phrase}"
  except ValueError:
    return f"{status} Client Closed Request"


class _JsonErrorTask(waitress.task.ErrorTask):
  """waitress's answer to a request it cannot parse (bad request line, header or chunk, body
  over the cap), as JSON like every other answer. Unsupported encodings are the client's
  mistake: 400, not waitress's 501."""

  def execute(self):
    error = self.request.error
    code = 400 if isinstance(error, waitress.utilities.ServerNotImplemented) else error.code
    body = error_body(f"{error.reason}: {error.body}").encode("utf-8")
    self.status = status_line(code)
    self.response_headers.append(("Content-Type", "application/json"))
    self.set_close_on_finish()
    self.content_length = len(body)
    self.write(body)


class _Channel(waitress.channel.HTTPChannel):
  """One client connection: JSON error answers, a deadline on the whole request, and room made
  at the connection limit by closing the stalest idle connection."""

  error_task_class = _JsonErrorTask
  request_started = None  # time.monotonic() of the first byte of the request being read
  connection_limit = None  # set per server by RestServer

  def __init__(self, server, sock, addr, adj, map=None):
    super().__init__(server, sock, addr, adj, map)
    if len(server.active_channels) > self.connection_limit:
      _close_stalest(server.active_channels.values(), self)

  def received(self, data):
    reading = self.request
    result = super().received(data)
    if self.request is None:  # nothing half-read: every request in data was whole
      self.request_started = None
    elif self.request is not reading:  # a new request began in this data
      self.request_started = time.monotonic()
    return result

  def idle(self):
    """Nothing to run or send: closing it loses no answer."""
    return not (self.requests or self.total_outbufs_len or self.will_close)

  def readable(self):
    # waitress asks every channel before each poll (at least every MAINTENANCE_SECONDS).
    started = self.request_started
    if (
      started is not None
      and not self.requests
      and time.monotonic() - started > self.adj.channel_timeout
    ):
      self.will_close = True  # the request did not arrive whole in time: close, no answer
    return super().readable()


def _close_stalest(channels, keep):
  """Marks the idle channel whose last byte is oldest to close (the loop closes it next)."""
  idle = [c for c in channels if c is not keep and c.idle()]
  if idle:
    min(idle, key=lambda c: c.last_activity).will_close = True


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
  """waitress serving a WSGI `app` on a bound socket, with http.server's serve_forever() and
  shutdown(), and a graceful shutdown: stop accepting, let requests in flight finish.

  Args:
    app: the WSGI application.
    sock: a bound socket (bind_socket); the server listens on it.
    threads: requests processed at once.
    read_timeout_seconds: a request must arrive whole within this many seconds of its first
      byte, and an idle connection is closed after this many.
    max_request_bytes: waitress answers 413 and closes past this many body bytes.
    connection_limit: connections held at once (None: default_connection_limit()).
  """

  # How often waitress looks for connections past the read timeout: a connection is closed
  # at most this (plus one loop turn) after its timeout, not up to a timeout later. Whole
  # seconds: waitress casts both settings with int(), and 0.5 became 0, a loop that polled
  # without waiting and kept a core busy while the server idled.
  MAINTENANCE_SECONDS = 1

  def __init__(
    self,
    app,
    sock,
    threads=8,
    read_timeout_seconds=30,
    max_request_bytes=1 << 30,
    connection_limit=None,
  ):
    self.server_address = sock.getsockname()[:2]
    self.connection_limit = connection_limit or default_connection_limit()
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
      max_request_body_size=max_request_bytes,
      expose_tracebacks=False,
      clear_untrusted_proxy_headers=False,
      asyncore_loop_timeout=self.MAINTENANCE_SECONDS,
      # poll(), not select(): select() fails on descriptors past 1024.
      asyncore_use_poll=True,
      # waitress stops accepting at its limit; ours closes an idle connection first, so
      # waitress's (ours, plus its listening socket and wake-up pipe, plus room for the
      # connections being closed) is reached only when every connection is busy.
      connection_limit=self.connection_limit + 16,
    )
    self._server.channel_class = type(
      "Channel", (_Channel,), {"connection_limit": self.connection_limit}
    )

  def serve_forever(self):
    self._running = True
    try:
      self._server.run()
    except OSError as error:  # a socket closed under the loop once shutdown() has begun
      if not (self._closing and error.errno == errno.EBADF):
        raise
    finally:
      self._stopped.set()

  def _channels(self):
    return list(self._server.active_channels.values())

  def _busy(self):
    dispatcher = self._server.task_dispatcher
    return (
      dispatcher.active_count
      or dispatcher.queue
      or any(c.requests or c.total_outbufs_len for c in self._channels())
    )

  def _in_loop(self, action):
    """Runs action() in waitress's loop thread, between two of its polls, and waits for it
    (sockets may only change there: one closed from another thread fails the loop's poll
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
    for channel in self._channels():
      if channel.requests or channel.total_outbufs_len:
        channel.readable = _never  # the loop asks each channel before each poll
      else:
        channel.will_close = True

  def _close_all(self):
    """Closes every connection, the listening socket and the wake-up pipe: waitress's loop
    ends when nothing is left to poll."""
    for channel in self._channels():
      with contextlib.suppress(OSError):  # already closed
        channel.handle_close()
    with contextlib.suppress(OSError):
      self._server.close()

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
