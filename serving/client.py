"""A client for TF Serving's REST API (real `tensorflow_model_server` or `serving.server`).

  python -m serving.client --port 8501 --model tfattn --text "4213" --text "17"
"""

import cli

import json
import time
import urllib.error
import urllib.request


class ServingError(Exception):
  """An error answer: HTTP status plus TF Serving's `{"error": ...}` message."""

  def __init__(self, status, message):
    super().__init__(f"HTTP {status}: {message}")
    self.status, self.message = status, message


class ServingClient:

  def __init__(self, model, host="127.0.0.1", port=8501, timeout=60.0):
    self.model, self.timeout = model, timeout
    self.base = f"http://{host}:{port}/v1/models/{model}"

  def _url(self, version=None, label=None):
    if version is not None:
      return f"{self.base}/versions/{int(version)}"
    if label is not None:
      return f"{self.base}/labels/{label}"
    return self.base

  def _request(self, url, body=None):
    data = None if body is None else json.dumps(body).encode("utf-8")
    request = urllib.request.Request(url, data=data, method="GET" if data is None else "POST",
                                     headers={"Content-Type": "application/json"})
    try:
      with urllib.request.urlopen(request, timeout=self.timeout) as response:
        return json.loads(response.read())
    except urllib.error.HTTPError as error:
      payload = error.read()
      try:
        message = json.loads(payload)["error"]
      except (ValueError, KeyError, TypeError):
        message = payload.decode("utf-8", "replace")
      raise ServingError(error.code, message) from None

  def status(self, version=None, label=None):
    return self._request(self._url(version, label))

  def metadata(self, version=None, label=None):
    return self._request(self._url(version, label) + "/metadata")

  def predict(self, instances=None, inputs=None, signature_name=None, version=None, label=None):
    """Row (`instances`) or columnar (`inputs`) predict; returns the decoded JSON answer."""
    body = {"instances": instances} if inputs is None else {"inputs": inputs}
    if signature_name:
      body["signature_name"] = signature_name
    return self._request(self._url(version, label) + ":predict", body)

  def wait_until_available(self, timeout=120.0):
    deadline = time.time() + timeout
    while True:
      try:
        states = self.status()["model_version_status"]
        if any(s["state"] == "AVAILABLE" for s in states):
          return states
      except (ServingError, urllib.error.URLError, ConnectionError):
        pass
      if time.time() > deadline:
        raise TimeoutError(f"{self.base} not AVAILABLE after {timeout}s")
      time.sleep(0.2)


def _define_flags():
  from absl import flags
  flags.DEFINE_string("host", "127.0.0.1", "Server host.")
  flags.DEFINE_integer("port", 8501, "REST port.", lower_bound=1, upper_bound=65535)
  flags.DEFINE_string("model", "tfattn", "Model name.")
  flags.DEFINE_multi_string("text", [], "Texts to send to serving_default (repeat the flag).")
  flags.DEFINE_bool("metadata", False, "Print the model's metadata instead.")
  flags.DEFINE_float("timeout", 60.0, "Seconds to wait for an answer.", lower_bound=0.0)


def main(argv):
  del argv  # cli.run refuses positional arguments
  from absl import flags
  f = flags.FLAGS
  if not f.metadata and not f.text:
    raise cli.UsageError("nothing to send: give --text=... (repeatable) or --metadata")
  client = ServingClient(f.model, f.host, f.port, timeout=f.timeout)
  try:
    answer = client.metadata() if f.metadata else client.predict(instances=f.text)
  except ServingError as error:
    raise cli.RunError(f"the server answered {error}") from None
  except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as error:
    reason = getattr(error, "reason", error)
    raise cli.RunError(f"cannot reach {client.base} ({reason}); is the server running on "
                       f"{f.host}:{f.port}? start one with python -m serving.server") from None
  print(json.dumps(answer, indent=2, ensure_ascii=False))


if __name__ == "__main__":
  _define_flags()
  cli.run(main)
