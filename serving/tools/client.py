"""Clients for TF Serving's REST and gRPC APIs (real `tensorflow_model_server` or
`serving.server`).

  python -m serving.tools.client --port 8501 --model tfattn --text "4213" --text "17"
  python -m serving.tools.client --protocol grpc --model tfattn --text "4213"     # port 8500
  python -m serving.tools.client --signature_name translate_nbest --model_version 2 --text "4213"
  python -m serving.tools.client --signature_name sample --text "4213" --seed 1 \\
      --text "4213" --seed 2
  python -m serving.tools.client --model lm --signature_name generate_up_to \\
      --text "To be, or not" --max_new_tokens 200          # a language model's length per text
"""

import cli

import dataclasses
import json
import time
import urllib.error
import urllib.request
from typing import List, Optional

from settings import setting


class ServingError(Exception):
  """An error answer: HTTP status plus TF Serving's `{"error": ...}` message.

  Args:
    status: the HTTP status of the answer.
    message: TF Serving's `{"error": ...}` message.
  """

  def __init__(self, status, message):
    super().__init__(f"HTTP {status}: {message}")
    self.status, self.message = status, message


class ServingClient:
  """A REST client of TF Serving's API for one model.

  Args:
    model: the model's name on the server.
    host, port: where the server's REST API listens.
    timeout: seconds a request may take before it fails.
  """

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
    request = urllib.request.Request(
      url,
      data=data,
      method="GET" if data is None else "POST",
      headers={"Content-Type": "application/json"},
    )
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


class GrpcServingClient:
  """TF Serving's gRPC API through tensorflow-serving-api's own stubs. Tensors go as
  TensorProtos: predict takes {input name: array-like} and returns {output name: numpy array}.
  Errors are grpc.RpcError (its code() and details() are TF Serving's).

  Args:
    model: the model's name on the server.
    host, port: where the server's gRPC API listens.
    timeout: seconds a call may take before it fails (DEADLINE_EXCEEDED).
  """

  def __init__(self, model, host="127.0.0.1", port=8500, timeout=60.0):
    import grpc
    from tensorflow_serving.apis import model_service_pb2_grpc, prediction_service_pb2_grpc

    self.model, self.timeout = model, timeout
    self.channel = grpc.insecure_channel(f"{host}:{port}")
    self.prediction = prediction_service_pb2_grpc.PredictionServiceStub(self.channel)
    self.models = model_service_pb2_grpc.ModelServiceStub(self.channel)

  def _spec(self, spec, signature_name=None, version=None, label=None):
    spec.name = self.model
    if signature_name:
      spec.signature_name = signature_name
    if version is not None:
      spec.version.value = int(version)
    elif label is not None:
      spec.version_label = label

  def predict(
    self, inputs, signature_name=None, version=None, label=None, output_filter=(), timeout=None
  ):
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2

    request = predict_pb2.PredictRequest(output_filter=list(output_filter))
    self._spec(request.model_spec, signature_name, version, label)
    for name, value in inputs.items():
      request.inputs[name].CopyFrom(tf.make_tensor_proto(value))
    response = self.prediction.Predict(request, timeout=timeout or self.timeout)
    return {name: tf.make_ndarray(proto) for name, proto in response.outputs.items()}

  def status(self, version=None):
    from tensorflow_serving.apis import get_model_status_pb2

    request = get_model_status_pb2.GetModelStatusRequest()
    self._spec(request.model_spec, version=version)
    return self.models.GetModelStatus(request, timeout=self.timeout)

  def metadata(self, version=None, label=None):
    """The GetModelMetadataResponse (its signature_def field) of the version that answers."""
    from tensorflow_serving.apis import get_model_metadata_pb2

    request = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
    self._spec(request.model_spec, version=version, label=label)
    return self.prediction.GetModelMetadata(request, timeout=self.timeout)

  def signature_defs(self, version=None, label=None):
    """{signature name: SignatureDef} of the version that answers."""
    from tensorflow_serving.apis import get_model_metadata_pb2

    signatures = get_model_metadata_pb2.SignatureDefMap()
    self.metadata(version, label).metadata["signature_def"].Unpack(signatures)
    return dict(signatures.signature_def)

  def reload_config(self, model_server_config):
    """ModelService.HandleReloadConfigRequest with a ModelServerConfig message."""
    from tensorflow_serving.apis import model_management_pb2

    request = model_management_pb2.ReloadConfigRequest(config=model_server_config)
    return self.models.HandleReloadConfigRequest(request, timeout=self.timeout)

  def close(self):
    self.channel.close()


@dataclasses.dataclass(frozen=True)
class ClientFlags:
  """The flags of `python -m serving.tools.client`."""

  host: str = setting("127.0.0.1", "Server host.")
  protocol: str = setting("rest", "TF Serving API to use.", choices=("rest", "grpc"))
  port: Optional[int] = setting(
    None, "Server port (default: 8501 for REST, 8500 for gRPC).", minimum=1, maximum=65535
  )
  model: str = setting("tfattn", "Model name.")
  text: List[str] = setting((), "Texts to send (repeat the flag).", repeat=True)
  signature_name: Optional[str] = setting(
    None, "Signature to call (default: serving_default), e.g. translate_nbest, sample, attention."
  )
  seed: List[int] = setting(
    (),
    "With --signature_name=sample: one seed per --text (repeat the flag, in order).",
    repeat=True,
  )
  max_new_tokens: Optional[int] = setting(
    None,
    "With a language model's generate_up_to or sample_up_to: the most tokens each --text may "
    "get (sent with every text; the model's limit caps it).",
    minimum=1,
  )
  model_version: Optional[int] = setting(
    None, "Ask this version (default: the newest available).", minimum=1
  )
  version_label: Optional[str] = setting(None, "Ask the version with this label (e.g. stable).")
  metadata: bool = setting(False, "Print the model's metadata instead.")
  timeout: float = setting(60.0, "Seconds to wait for an answer.", minimum=0.0)


def _define_flags():

  cli.define_flags(ClientFlags)


def main(argv):
  del argv  # cli.run refuses positional arguments
  from absl import flags

  f = flags.FLAGS
  if not f.metadata and not f.text:
    raise cli.UsageError("nothing to send: give --text=... (repeatable) or --metadata")
  if f.model_version is not None and f.version_label:
    raise cli.UsageError("give --model_version or --version_label, not both")
  if f.seed and len(f.seed) != len(f.text):
    raise cli.UsageError(f"{len(f.seed)} --seed for {len(f.text)} --text: give one seed per text")
  if f.protocol == "grpc":
    print(json.dumps(_grpc_answer(f), indent=2, ensure_ascii=False, sort_keys=True))
    return
  port = f.port or 8501
  client = ServingClient(f.model, f.host, port, timeout=f.timeout)
  try:
    answer = (
      client.metadata(f.model_version, f.version_label)
      if f.metadata
      else client.predict(instances=_instances(f), signature_name=f.signature_name, **_version(f))
    )
  except ServingError as error:
    raise cli.RunError(f"the server answered {error}") from None
  except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as error:
    reason = getattr(error, "reason", error)
    raise cli.RunError(
      f"cannot reach {client.base} ({reason}); is the server running on "
      f"{f.host}:{port}? start one with python -m serving.server"
    ) from None
  print(json.dumps(answer, indent=2, ensure_ascii=False, sort_keys=True))


def _instances(f):
  """Rows for REST: the texts, or objects {text, seed, max_new_tokens} with what is given."""
  if not f.seed and f.max_new_tokens is None:
    return list(f.text)
  rows = [{"text": text} for text in f.text]
  for row, seed in zip(rows, f.seed):
    row["seed"] = seed
  if f.max_new_tokens is not None:
    for row in rows:
      row["max_new_tokens"] = f.max_new_tokens
  return rows


def _version(f):
  return {"version": f.model_version, "label": f.version_label}


def _grpc_answer(f):
  """The gRPC answer in the REST API's JSON (the row format for a predict), so both protocols
  print the same."""
  cli.start_tensorflow_quietly()  # the protos import TensorFlow
  import grpc
  import numpy as np

  from serving.server.tensor_json import format_predict_response, metadata_json

  port = f.port or 8500
  client = GrpcServingClient(f.model, f.host, port, timeout=f.timeout)
  try:
    if f.metadata:
      spec = client.metadata(f.model_version, f.version_label).model_spec
      signatures = client.signature_defs(f.model_version, f.version_label)
      return metadata_json(spec.name, spec.version.value, signatures)
    inputs = {"text": f.text}
    if f.seed:
      inputs["seed"] = np.array(f.seed, dtype=np.int64)
    if f.max_new_tokens is not None:
      inputs["max_new_tokens"] = np.full([len(f.text)], f.max_new_tokens, np.int32)
    outputs = client.predict(inputs, f.signature_name, **_version(f))
    return json.loads(format_predict_response(outputs, row_format=True))
  except grpc.RpcError as error:
    if error.code() == grpc.StatusCode.UNAVAILABLE:
      raise cli.RunError(
        f"cannot reach {f.host}:{port} over gRPC ({error.details()}); is the "
        "server running? start one with python -m serving.server"
      ) from None
    raise cli.RunError(f"the server answered {error.code().name}: {error.details()}") from None
  finally:
    client.close()


if __name__ == "__main__":
  _define_flags()
  cli.run(main)
