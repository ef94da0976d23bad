"""serving.server.grpc_service through a real grpc server and tensorflow-serving-api's own stubs:
the same models and answers as REST (one ServerCore behind both), TF Serving's status codes and
messages (prediction_service_impl.cc, predict_util.cc, get_model_metadata_impl.cc,
get_model_status_impl.cc, model_service_impl.cc, server_core.cc), deadlines, config reloads."""

import base64
import json
import os
import shutil
import threading
import time
import urllib.request

import grpc
import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import (
  classification_pb2,
  get_model_metadata_pb2,
  get_model_status_pb2,
  inference_pb2,
  input_pb2,
  predict_pb2,
  regression_pb2,
)
from tensorflow_serving.config import model_server_config_pb2
from test_server_conformance import _half_plus_two

from serving.server import grpc_service
from serving.server.batching import Batcher, BatchingParameters
from serving.server.model_manager import ModelManager
from serving.server.monitoring import Metrics
from serving.server.rest_api import make_server
from serving.server.server_core import ServerCore
from serving.tools.client import GrpcServingClient, ServingClient

import classifier_fixtures
from train_helpers import poll_until

# The session's classifier export (tests/classifier_fixtures.py), shared with the attention tests.
classifier_run = classifier_fixtures.classifier_run
classifier_exported = classifier_fixtures.classifier_exported

NAME = "numbers"
MAX_MESSAGE = 1 << 20


def _spin_model(base):
  """<base>/1: a TF1 model whose `spin` signature counts to its input `n` in a while loop: a
  model run that only a deadline ends."""
  with tf.Graph().as_default(), tf.compat.v1.Session() as session:
    n = tf.compat.v1.placeholder(tf.int64, shape=[None], name="n")
    count = tf.while_loop(lambda i: i < n[0], lambda i: i + 1, [tf.constant(0, tf.int64)])
    builder = tf.compat.v1.saved_model.Builder(str(base / "1"))
    builder.add_meta_graph_and_variables(
      session,
      ["serve"],
      signature_def_map={
        "serving_default": tf.compat.v1.saved_model.predict_signature_def(
          {"n": n}, {"count": tf.reshape(count, [1])}
        )
      },
    )
    builder.save()
  return base


def _example_model(base):
  """<base>/1: a TF1 model reading tf.Examples (float feature x) as TF Serving's test models
  do: `serving_default` classifies (classes, scores [batch, 2]), `regress` regresses
  (outputs: x / 2 + 2), `predict` is a predict signature on the same graph."""
  with tf.Graph().as_default(), tf.compat.v1.Session() as session:
    serialized = tf.compat.v1.placeholder(tf.string, shape=[None], name="tf_example")
    features = tf.io.parse_example(serialized, {"x": tf.io.FixedLenFeature([1], tf.float32)})
    x = features["x"]
    y = x * 0.5 + 2.0
    classes = tf.tile(tf.constant([["small", "large"]]), [tf.shape(x)[0], 1])
    scores = tf.concat([1.0 - x / 10.0, x / 10.0], axis=1)
    signatures = tf.compat.v1.saved_model.signature_def_utils
    builder = tf.compat.v1.saved_model.Builder(str(base / "1"))
    builder.add_meta_graph_and_variables(
      session,
      ["serve"],
      signature_def_map={
        "serving_default": signatures.classification_signature_def(serialized, classes, scores),
        "regress": signatures.regression_signature_def(serialized, y),
        "predict": signatures.predict_signature_def({"inputs": serialized}, {"y": y}),
      },
    )
    builder.save()
  return base


@pytest.fixture(scope="module")
def served(exported, classifier_exported, tmp_path_factory):
  """(gRPC port, REST port, core, metrics): our seq2seq export as "numbers", a classifier
  export as "classifier", the spinning model as "spin", both protocols on one ServerCore."""
  base, _ = exported
  managers = [
    ModelManager(NAME, str(base)),
    ModelManager("classifier", str(classifier_exported[0])),
    ModelManager("spin", str(_spin_model(tmp_path_factory.mktemp("spin")))),
    ModelManager("examples", str(_example_model(tmp_path_factory.mktemp("examples")))),
  ]
  metrics = Metrics()
  core = ServerCore(managers, metrics=metrics)
  core.start()
  grpc_server, ports = grpc_service.make_server(
    core, ["127.0.0.1:0"], 4, metrics, max_receive_bytes=MAX_MESSAGE
  )
  # A REST deadline no first run comes near, even compiling on a GPU or on a loaded machine
  # (3 s once answered 504 there); the deadline test has a server of its own.
  rest = make_server(
    core, "127.0.0.1", 0, timeout_seconds=120, metrics=metrics, metrics_path="/metrics"
  )
  threading.Thread(target=rest.serve_forever, daemon=True).start()
  yield ports["127.0.0.1:0"], rest.server_address[1], core, metrics
  rest.shutdown(0)
  grpc_server.stop(0).wait()
  core.stop()


@pytest.fixture(scope="module")
def client(served):
  client = GrpcServingClient(NAME, port=served[0])
  yield client
  client.close()


def _error(call, *args, **kwargs):
  """(status code, details) of a failing call."""
  with pytest.raises(grpc.RpcError) as error:
    call(*args, **kwargs)
  return error.value.code(), error.value.details()


def _int64_proto_with_3_bytes():
  """An int64 [1] TensorProto whose content is 3 bytes long: not a tensor."""
  proto = tf.make_tensor_proto(np.array([1], np.int64))
  proto.tensor_content = b"abc"
  return proto


def _request(model=NAME, signature_name="", **inputs):
  request = predict_pb2.PredictRequest()
  request.model_spec.name = model
  request.model_spec.signature_name = signature_name
  for name, value in inputs.items():
    request.inputs[name].CopyFrom(tf.make_tensor_proto(value))
  return request


def test_predict_answers_as_rest_does_and_names_the_version(served, client):
  texts = ["12", "345", ""]
  rest = ServingClient(NAME, port=served[1]).predict(inputs={"text": texts})["outputs"]
  outputs = client.predict({"text": texts})
  assert [t.decode() for t in outputs["translation"]] == rest["translation"]
  np.testing.assert_allclose(outputs["score"], rest["score"], rtol=1e-6)
  response = client.prediction.Predict(_request(text=["12"]), timeout=60)
  assert (
    response.model_spec.name,
    response.model_spec.version.value,
    response.model_spec.signature_name,
  ) == (NAME, 1, "serving_default")


def _example_inputs(specs):
  """Inputs any signature accepts, from its input specs alone: 2 rows; strings are numbers,
  integers small token ids (the attention signature's `layer`: -1, every layer), floats ones;
  unknown sizes 3."""
  inputs = {}
  for name, spec in specs.items():
    shape = [2] + [d if d is not None else 3 for d in (spec.shape.as_list() or [None])[1:]]
    if spec.dtype == tf.string:
      value = np.array(["12", "345"], object).reshape([2] + [1] * (len(shape) - 1))
      inputs[name] = np.broadcast_to(value, shape)
    elif name == "layer":
      inputs[name] = np.full(shape, -1, spec.dtype.as_numpy_dtype)
    elif spec.dtype.is_integer:
      inputs[name] = (
        (np.arange(np.prod(shape)) % 5 + 4).reshape(shape).astype(spec.dtype.as_numpy_dtype)
      )
    else:
      inputs[name] = np.ones(shape, spec.dtype.as_numpy_dtype)
  return inputs


def _to_json(value):
  """array.tolist() with bytes as text: a REST request's JSON value."""
  if isinstance(value, list):
    return [_to_json(v) for v in value]
  return value.decode() if isinstance(value, bytes) else value


def _from_json(value, output_name, dtype):
  """A REST output (JSON) as the numpy array it encodes."""
  if dtype == tf.string:

    def decode(v):
      if isinstance(v, list):
        return [decode(x) for x in v]
      return base64.b64decode(v["b64"]) if isinstance(v, dict) else v.encode()

    return np.array(decode(value), dtype=object)
  return np.array(value, dtype=dtype.as_numpy_dtype)


@pytest.mark.parametrize("model", [NAME, "classifier"])
def test_every_signature_answers_the_same_tensors_over_grpc_and_rest(served, model):
  """The same request through a stock PredictionServiceStub and through REST's columnar form:
  identical tensors (REST writes float32 in shortest round-trip form, so equal means equal),
  for every signature the export has, found from its metadata, never by name."""
  servable = served[2].servable(model)
  rest = ServingClient(model, port=served[1])
  grpc_client = GrpcServingClient(model, port=served[0])
  try:
    signatures = grpc_client.signature_defs()
    assert set(signatures) == set(servable.signature_defs) and len(signatures) >= 2
    for name, signature_def in sorted(signatures.items()):
      if name.startswith("__"):  # __saved_model_init_op: the loader's, not a signature to run
        continue
      inputs = _example_inputs(servable.signatures[name].input_specs)
      over_grpc = grpc_client.predict(inputs, signature_name=name)
      body = {k: _to_json(v.tolist()) for k, v in inputs.items()}
      outputs = rest.predict(inputs=body, signature_name=name)["outputs"]
      if len(signature_def.outputs) == 1:
        outputs = {next(iter(signature_def.outputs)): outputs}
      assert set(outputs) == set(over_grpc) == set(signature_def.outputs), name
      for output, value in over_grpc.items():
        dtype = tf.as_dtype(signature_def.outputs[output].dtype)
        assert value.dtype == dtype.as_numpy_dtype or dtype == tf.string, (name, output)
        np.testing.assert_array_equal(
          _from_json(outputs[output], output, dtype), value, err_msg=f"{model} {name} {output}"
        )
  finally:
    grpc_client.close()


def test_any_signature_by_name_version_and_output_filter(client):
  ids = client.predict(
    {"source_ids": np.array([[5, 6, 7]], np.int32)}, signature_name="translate_ids", version=1
  )
  assert ids["ids"].dtype == np.int32 and ids["score"].shape == (1,)
  scored = client.predict(
    {"source_ids": np.array([[5, 6, 7]], np.int32), "target_ids": ids["ids"]},
    signature_name="score",
  )
  assert set(scored) == {"log_prob"} and scored["log_prob"].shape == (1,)
  # score(source, translate_ids(source)) is the log-probability the search reported.
  np.testing.assert_allclose(scored["log_prob"], ids["log_prob"], rtol=1e-4, atol=1e-4)
  only = client.predict({"text": ["12"]}, output_filter=["score"])
  assert set(only) == {"score"}


# (TF Serving test or source it follows, change to a valid request, code, message substring).
PREDICT_ERRORS = [
  (
    "predict_impl_test MissingOrEmptyModelSpec",
    lambda r: r.ClearField("model_spec"),
    grpc.StatusCode.INVALID_ARGUMENT,
    "Missing ModelSpec",
  ),
  (
    "predict_impl_test MissingOrEmptyModelSpec",
    lambda r: setattr(r.model_spec, "name", ""),
    grpc.StatusCode.INVALID_ARGUMENT,
    "ModelSpec has no name specified.",
  ),
  (
    "predict_impl_test MissingOrEmptyModelSpec",
    lambda r: setattr(r.model_spec, "name", "no"),
    grpc.StatusCode.NOT_FOUND,
    "Servable not found for request: Latest(no)",
  ),
  (
    "predict_impl_test ModelSpecOverride",
    lambda r: r.model_spec.version.__setattr__("value", 9),
    grpc.StatusCode.NOT_FOUND,
    f"Servable not found for request: Specific({NAME}, 9)",
  ),
  (
    "server_core.cc GetModelVersionForLabel",
    lambda r: setattr(r.model_spec, "version_label", "canary"),
    grpc.StatusCode.INVALID_ARGUMENT,
    "Unrecognized servable version label: canary",
  ),
  (
    "predict_util.cc RunPredict",
    lambda r: setattr(r.model_spec, "signature_name", "nope"),
    grpc.StatusCode.FAILED_PRECONDITION,
    'Serving signature key "nope" not found.',
  ),
  (
    "predict_impl_test EmptyInputList",
    lambda r: r.inputs.clear(),
    grpc.StatusCode.INVALID_ARGUMENT,
    "input size does not match signature: 0!=1 len({}) != "
    "len({text}). Sent extra: {}. Missing but required: {text}.",
  ),
  (
    "predict_impl_test InputTensorsDontMatchModelSpecInputs",
    lambda r: r.inputs["key"].CopyFrom(tf.make_tensor_proto(["any_key"])),
    grpc.StatusCode.INVALID_ARGUMENT,
    "input size does not match signature: 2!=1 "
    "len({key,text}) != len({text}). Sent extra: {key}. Missing but required: {}.",
  ),
  (
    "predict_impl_test OutputFiltersDontMatchModelSpecOutputs",
    lambda r: r.output_filter.append("output_filter"),
    grpc.StatusCode.INVALID_ARGUMENT,
    "output tensor alias not found in signature: output_filter Outputs expected to be in the "
    "set {log_prob,score,translation}.",
  ),
  (
    "predict_impl_test OutputFiltersDontMatchModelSpecOutputs",
    lambda r: r.output_filter.extend(["score", "score"]),
    grpc.StatusCode.INVALID_ARGUMENT,
    "duplicate output tensor alias: score",
  ),
  (
    "predict_impl_test InputTensorsHaveWrongType",
    lambda r: r.inputs["text"].CopyFrom(tf.make_tensor_proto([1.5])),
    grpc.StatusCode.INVALID_ARGUMENT,
    "Expects arg[0] to be string but float is provided",
  ),
  (
    "direct_session.cc feed shape check (bad shape)",
    lambda r: r.inputs["text"].CopyFrom(tf.make_tensor_proto([["a"]])),
    grpc.StatusCode.INVALID_ARGUMENT,
    "Cannot feed value of shape (1, 1)",
  ),
  (
    "cc/saved_model/util.cc GetInputValues: tensor parsing error",
    lambda r: (
      r.inputs.clear(),
      setattr(r.model_spec, "name", "spin"),
      r.inputs["n"].MergeFrom(_int64_proto_with_3_bytes()),
    ),
    grpc.StatusCode.INVALID_ARGUMENT,
    "tensor parsing error: n",
  ),
  (
    "cc/saved_model/util.cc GetInputValues: an alias the signature lacks",
    lambda r: r.inputs["x"].CopyFrom(r.inputs.pop("text")),
    grpc.StatusCode.INVALID_ARGUMENT,
    "Signature input alias: text(feed name: ",
  ),
  *[
    (
      f"tensor.cc Tensor::FromProto via util.cc GetInputValues: {why}",
      change,
      grpc.StatusCode.INVALID_ARGUMENT,
      "tensor parsing error: text",
    )
    for why, change in (
      ("dtype 999", lambda r: setattr(r.inputs["text"], "dtype", 999)),
      ("DT_INVALID", lambda r: setattr(r.inputs["text"], "dtype", 0)),
      ("a shape of 2^40", lambda r: setattr(r.inputs["text"].tensor_shape.dim[0], "size", 2**40)),
      ("a negative size", lambda r: setattr(r.inputs["text"].tensor_shape.dim[0], "size", -2)),
      ("an unknown rank", lambda r: setattr(r.inputs["text"].tensor_shape, "unknown_rank", True)),
      (
        "255 dimensions",
        lambda r: [r.inputs["text"].tensor_shape.dim.add(size=1) for _ in range(254)],
      ),
      ("DT_RESOURCE", lambda r: setattr(r.inputs["text"], "dtype", 20)),
    )
  ],
  (
    "the export's in-graph id check (bad id)",
    lambda r: (
      r.inputs.clear(),
      setattr(r.model_spec, "signature_name", "translate_ids"),
      r.inputs["source_ids"].CopyFrom(tf.make_tensor_proto(np.array([[5, 5000]], np.int32))),
    ),
    grpc.StatusCode.INVALID_ARGUMENT,
    # The runtime's whole text, as TF Serving's Session passes it: every bracket of the Assert.
    "assertion failed: [source_ids holds a token id >= the vocabulary size 14] [Condition x < y "
    "did not hold element-wise:] [x (source_ids:0) = ] [[5 5000]]",
  ),
  (
    "the export's UTF-8 check (TensorFlow's own error)",
    lambda r: r.inputs["text"].CopyFrom(tf.make_tensor_proto([b"\xff\xfe"])),
    grpc.StatusCode.INVALID_ARGUMENT,
    "Invalid",
  ),
]


@pytest.mark.parametrize(
  "source,change,code,message",
  PREDICT_ERRORS,
  ids=[f"{c[0]}-{i}" for i, c in enumerate(PREDICT_ERRORS)],
)
def test_predict_errors_carry_tf_servings_codes_and_messages(client, source, change, code, message):
  request = _request(text=["12"])
  change(request)
  got_code, details = _error(client.prediction.Predict, request, timeout=60)
  assert got_code == code and message in details, details
  assert client.predict({"text": ["12"]})["translation"].shape == (1,)  # still serving


def test_bytes_that_are_not_a_request_are_invalid_argument(client):
  predict = client.channel.unary_unary("/tensorflow.serving.PredictionService/Predict")
  code, details = _error(predict, b"\xff\xff\xff\xff", timeout=60)
  assert code == grpc.StatusCode.INVALID_ARGUMENT
  assert "the request is not a tensorflow.serving.PredictRequest" in details


def _malformed_tensor(rng):
  """A TensorProto built from random parts: any dtype number, odd shapes, content of any
  length, typed values of any kind."""
  proto = tf.make_tensor_proto(np.zeros([0], np.float32))
  proto.Clear()
  proto.dtype = int(rng.choice([0, 1, 2, 3, 5, 6, 7, 9, 10, 14, 19, 20, 21, 101, 999, 2**31 - 1]))
  for _ in range(int(rng.integers(0, 4))):
    size = rng.choice([-7, -1, 0, 1, 2, 3, 2**20, 2**31, 2**40, 2**62])
    proto.tensor_shape.dim.add(size=int(size))
  proto.tensor_shape.unknown_rank = bool(rng.random() < 0.1)
  kind = rng.integers(0, 6)
  if kind == 0:
    proto.tensor_content = rng.bytes(int(rng.integers(0, 40)))
  elif kind == 1:
    proto.float_val.extend(rng.normal(size=int(rng.integers(0, 6))).tolist())
  elif kind == 2:
    proto.int64_val.extend(rng.integers(-(2**62), 2**62, int(rng.integers(0, 6))).tolist())
  elif kind == 3:
    proto.string_val.extend(rng.bytes(3) for _ in range(int(rng.integers(0, 4))))
  elif kind == 4:
    proto.half_val.extend(rng.integers(0, 2**16, int(rng.integers(0, 4))).tolist())
  return proto


def test_hundreds_of_malformed_grpc_messages_never_answer_unknown(served, client):
  """Malformed tensors under every alias, and requests whose bytes are mangled: each answer is
  TF Serving's code for a bad request (or OK when the mangling left a valid request), never
  UNKNOWN or INTERNAL, never a traceback; the server serves as before afterwards."""
  rng = np.random.default_rng(34)
  valid = _request(text=["12"]).SerializeToString()
  raw_predict = client.channel.unary_unary("/tensorflow.serving.PredictionService/Predict")
  allowed = {
    grpc.StatusCode.OK,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.FAILED_PRECONDITION,
  }
  answers = {}
  for index in range(500):
    if index % 2:
      request = _request(signature_name=str(rng.choice(["", "translate_ids", "encode"])))
      for alias in rng.choice(["text", "source_ids", "x"], int(rng.integers(1, 3))):
        request.inputs[str(alias)].CopyFrom(_malformed_tensor(rng))
      call, message = client.prediction.Predict, request
    else:
      data = bytearray(valid)
      for _ in range(int(rng.integers(1, 4))):
        data[int(rng.integers(0, len(data)))] = int(rng.integers(0, 256))
      call, message = raw_predict, bytes(data[: int(rng.integers(1, len(data) + 1))])
    try:
      call(message, timeout=60)
      code, details = grpc.StatusCode.OK, ""
    except grpc.RpcError as error:
      code, details = error.code(), error.details() or ""
    answers[code] = answers.get(code, 0) + 1
    assert code in allowed and "Traceback" not in details, (index, code, details)
  assert answers[grpc.StatusCode.INVALID_ARGUMENT] > 300, answers
  assert client.predict({"text": ["12"]})["translation"].shape == (1,)


def _wait_for_count(metrics, model, code, count):
  """Waits (up to 60 s) until request_count{model, code} reaches count."""
  line = f':tensorflow:serving:request_count{{model_name="{model}",status="{code}"}} {count:.1f}'
  deadline = time.time() + 60
  while line not in metrics.page()[1].decode():
    assert time.time() < deadline, metrics.page()[1].decode()[:2000]
    time.sleep(0.05)


@pytest.mark.slow  # waits out a timeout: seconds of waiting, kept out of test-fast
def test_a_run_past_the_deadline_is_stopped_on_both_protocols(served, client):
  """A gRPC call's deadline and --rest_api_timeout_in_ms (3 s here) end a model run that
  would never finish on its own (RunOptions.timeout_in_ms), and the server keeps serving."""
  spin = GrpcServingClient("spin", port=served[0])
  try:
    code, details = _error(spin.predict, {"n": np.array([10**15])}, timeout=3)
    assert code == grpc.StatusCode.DEADLINE_EXCEEDED, details
    # The client gives up at its deadline whatever the server does; the server's own answer
    # (counted once its run has ended) shows the run was stopped there too.
    _wait_for_count(served[3], "spin", "DEADLINE_EXCEEDED", 1)
    assert spin.predict({"n": np.array([10])})["count"].tolist() == [10]
  finally:
    spin.close()
  rest = make_server(served[2], "127.0.0.1", 0, timeout_seconds=3, metrics=served[3])
  threading.Thread(target=rest.serve_forever, daemon=True).start()
  request = urllib.request.Request(
    f"http://127.0.0.1:{rest.server_address[1]}/v1/models/spin:predict",
    data=b'{"instances": [1000000000000000]}',
    method="POST",
  )
  try:
    with pytest.raises(urllib.error.HTTPError) as error:
      urllib.request.urlopen(request, timeout=60)
    # The body is read before the server stops: shutdown(0) drops what it has not yet sent (a
    # clean clone under load read the headers, then lost the body to that race).
    body = error.value.read()
  finally:
    rest.shutdown(0)
  assert error.value.code == 504 and json.loads(body)["error"]
  _wait_for_count(served[3], "spin", "DEADLINE_EXCEEDED", 2)
  assert client.predict({"text": ["12"]})["score"].shape == (1,)


def test_messages_over_the_cap_are_refused(client):
  code, _ = _error(client.predict, {"text": ["1" * MAX_MESSAGE]})
  assert code == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_model_metadata_is_the_signature_def_map(served, client):
  signatures = client.signature_defs()
  servable = served[2].servable(NAME)
  assert signatures == dict(servable.signature_defs)
  assert {"serving_default", "translate_ids", "score", "encode"} <= set(signatures)
  assert signatures["serving_default"].method_name == "tensorflow/serving/predict"
  for fields, message in (
    ([], "GetModelMetadataRequest must specify at least one metadata_field"),
    (["signature_def", "other"], "Metadata field other is not supported"),
  ):
    request = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=fields)
    request.model_spec.name = NAME
    assert _error(client.prediction.GetModelMetadata, request) == (
      grpc.StatusCode.INVALID_ARGUMENT,
      message,
    )
  assert _error(
    client.prediction.GetModelMetadata,
    get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"]),
  ) == (grpc.StatusCode.INVALID_ARGUMENT, "Missing ModelSpec")


def test_model_status(client):
  status = client.status()
  assert [
    (s.version, s.state, s.status.error_code, s.status.error_message)
    for s in status.model_version_status
  ] == [(1, get_model_status_pb2.ModelVersionStatus.AVAILABLE, 0, "")]
  assert _error(client.status, version=7) == (
    grpc.StatusCode.NOT_FOUND,
    f"Could not find version 7 of model {NAME}",
  )
  assert _error(client.models.GetModelStatus, get_model_status_pb2.GetModelStatusRequest()) == (
    grpc.StatusCode.INVALID_ARGUMENT,
    "Missing ModelSpec",
  )


def _examples(*values, context=None):
  """An Input of tf.Examples with float feature x (example_list, or with a context)."""
  request_input = input_pb2.Input()
  if context is None:
    examples = request_input.example_list.examples
  else:
    listed = request_input.example_list_with_context
    listed.context.features.feature["c"].float_list.value.append(context)
    examples = listed.examples
  for value in values:
    examples.add().features.feature["x"].float_list.value.append(value)
  return request_input


def _classify(model=NAME, signature_name="", values=(1.0,)):
  request = classification_pb2.ClassificationRequest()
  request.model_spec.name, request.model_spec.signature_name = model, signature_name
  request.input.CopyFrom(_examples(*values))
  return request


def _regress(model=NAME, signature_name="", values=(1.0,)):
  request = regression_pb2.RegressionRequest()
  request.model_spec.name, request.model_spec.signature_name = model, signature_name
  request.input.CopyFrom(_examples(*values))
  return request


def _multi(*tasks, values=(1.0,)):
  """A MultiInferenceRequest of (model, signature_name, method_name) tasks."""
  request = inference_pb2.MultiInferenceRequest()
  for model, signature_name, method in tasks:
    task = request.tasks.add(method_name=method)
    task.model_spec.name, task.model_spec.signature_name = model, signature_name
  request.input.CopyFrom(_examples(*values))
  return request


CLASSIFY = "tensorflow/serving/classify"
REGRESS = "tensorflow/serving/regress"
# TF Serving's answers under its default flags (--enable_signature_method_name_check=false,
# model_servers/server.h:102): (TF Serving source file:line, method, request, code, message).
EXAMPLE_API_ERRORS = [
  (
    "classification_service.cc:35-39",
    "Classify",
    classification_pb2.ClassificationRequest(),
    grpc.StatusCode.INVALID_ARGUMENT,
    "Missing ModelSpec",
  ),
  (
    "regression_service.cc:33-37",
    "Regress",
    regression_pb2.RegressionRequest(),
    grpc.StatusCode.INVALID_ARGUMENT,
    "Missing ModelSpec",
  ),
  (
    "server_core.cc:844 GetServableHandle",
    "Classify",
    _classify(model="nope"),
    grpc.StatusCode.NOT_FOUND,
    "Servable not found for request: Latest(nope)",
  ),
  (
    "classifier.cc:157-161 GetClassificationSignatureDef",
    "Classify",
    _classify(signature_name="nope"),
    grpc.StatusCode.INVALID_ARGUMENT,
    "No signature was found with the name: nope",
  ),
  (
    "classifier.cc:188-192 PreProcessClassification (3 outputs)",
    "Classify",
    _classify(),
    grpc.StatusCode.INVALID_ARGUMENT,
    "Expected one or two output Tensors, found 3",
  ),
  (
    "classifier.cc:185-187 PreProcessClassification (2 inputs)",
    "Classify",
    _classify(signature_name="score"),
    grpc.StatusCode.INVALID_ARGUMENT,
    "Expected one input Tensor.",
  ),
  (
    "classifier.cc:194-199 PreProcessClassification (no `inputs`)",
    "Classify",
    _classify(model="classifier"),
    grpc.StatusCode.INVALID_ARGUMENT,
    'No classification inputs found in SignatureDef: inputs {\n  key: "text"',
  ),
  (
    "classifier.cc:204-212 PreProcessClassification (no classes or scores)",
    "Classify",
    _classify(model="examples", signature_name="predict"),
    grpc.StatusCode.INVALID_ARGUMENT,
    'Expected classification signature outputs to contain at least one of "classes" or '
    '"scores". Signature was: inputs {',
  ),
  (
    "util.cc:165-168 InputToSerializedExampleTensor",
    "Classify",
    _classify(model="examples", values=()),
    grpc.StatusCode.INVALID_ARGUMENT,
    "Input is empty.",
  ),
  (
    "regressor.cc:152-156 GetRegressionSignatureDef",
    "Regress",
    _regress(signature_name="nope"),
    grpc.StatusCode.INVALID_ARGUMENT,
    "No signature was found with the name: nope",
  ),
  (
    "regressor.cc:182-184 PreProcessRegression (3 outputs)",
    "Regress",
    _regress(),
    grpc.StatusCode.INVALID_ARGUMENT,
    "Expected one output Tensor.",
  ),
  (
    "regressor.cc:196-201 PreProcessRegression (no `outputs`)",
    "Regress",
    _regress(model="examples", signature_name="predict"),
    grpc.StatusCode.INVALID_ARGUMENT,
    'No regression outputs found in SignatureDef: inputs {\n  key: "inputs"',
  ),
  (
    "multi_inference_helper.cc:28-33, 52 + server_core.cc:844 (no task)",
    "MultiInference",
    inference_pb2.MultiInferenceRequest(),
    grpc.StatusCode.INVALID_ARGUMENT,
    "ModelSpec has no name specified.",
  ),
  (
    "multi_inference_helper.cc:52 GetServableHandle (unknown model)",
    "MultiInference",
    _multi(("nope", "", CLASSIFY)),
    grpc.StatusCode.NOT_FOUND,
    "Servable not found for request: Latest(nope)",
  ),
  (
    "multi_inference.cc:43-46 (a task without a model name)",
    "MultiInference",
    _multi(("examples", "", CLASSIFY), ("", "regress", REGRESS)),
    grpc.StatusCode.INVALID_ARGUMENT,
    "Found ModelSpec with an empty model name.",
  ),
  (
    "multi_inference.cc:48-53 (two models)",
    "MultiInference",
    _multi(("examples", "", CLASSIFY), (NAME, "regress", REGRESS)),
    grpc.StatusCode.INVALID_ARGUMENT,
    "All ModelSpecs in a MultiInferenceRequest must access the same model name.",
  ),
  (
    "multi_inference.cc:60-63 (a signature twice)",
    "MultiInference",
    _multi(("examples", "", CLASSIFY), ("examples", "serving_default", CLASSIFY)),
    grpc.StatusCode.INVALID_ARGUMENT,
    "Duplicate evaluation of signature: serving_default",
  ),
  (
    "multi_inference.cc:66-69 (unknown signature)",
    "MultiInference",
    _multi(("examples", "nope", CLASSIFY)),
    grpc.StatusCode.INVALID_ARGUMENT,
    "Requested signature not found in model graph: nope",
  ),
  (
    "multi_inference.cc:74-76 + classifier.cc:188-192 (a classify task, predict signature)",
    "MultiInference",
    _multi((NAME, "", CLASSIFY)),
    grpc.StatusCode.INVALID_ARGUMENT,
    "Expected one or two output Tensors, found 3",
  ),
  (
    "multi_inference.cc:80-83 (another method)",
    "MultiInference",
    _multi(("examples", "", "tensorflow/serving/predict")),
    grpc.StatusCode.UNIMPLEMENTED,
    "Unsupported signature method_name: tensorflow/serving/predict",
  ),
  (
    "multi_inference.cc:95-97 + util.cc:165-168 (no example)",
    "MultiInference",
    _multi(("examples", "", CLASSIFY), values=()),
    grpc.StatusCode.INVALID_ARGUMENT,
    "Input is empty.",
  ),
]


@pytest.mark.parametrize(
  "source,method,request_message,code,message",
  EXAMPLE_API_ERRORS,
  ids=[f"{c[1]}-{c[0]}" for c in EXAMPLE_API_ERRORS],
)
def test_classify_regress_and_multi_inference_answer_as_tf_serving(
  client, source, method, request_message, code, message
):
  got_code, details = _error(getattr(client.prediction, method), request_message, timeout=60)
  assert (got_code, details.startswith(message)) == (code, True), details


def test_classify_regress_and_multi_inference_run_tf_example_signatures(client):
  """The tf.Examples of the request, serialized, feed the signature's `inputs`; its outputs
  come back as TF Serving's results (values from the model: y = x / 2 + 2)."""
  answer = client.prediction.Classify(_classify(model="examples", values=(1.0, 4.0)), timeout=60)
  assert (answer.model_spec.name, answer.model_spec.version.value) == ("examples", 1)
  assert answer.model_spec.signature_name == "serving_default"
  rows = [[(c.label, round(c.score, 6)) for c in r.classes] for r in answer.result.classifications]
  assert rows == [[("small", 0.9), ("large", 0.1)], [("small", 0.6), ("large", 0.4)]]
  answer = client.prediction.Regress(_regress("examples", "regress", (1.0, 4.0)), timeout=60)
  assert [r.value for r in answer.result.regressions] == [2.5, 4.0]
  request = _regress("examples", "regress", (2.0,))
  request.input.CopyFrom(_examples(2.0, 6.0, context=7.0))  # the context joins every example
  answer = client.prediction.Regress(request, timeout=60)
  assert [r.value for r in answer.result.regressions] == [3.0, 5.0]
  both = client.prediction.MultiInference(
    _multi(("examples", "", CLASSIFY), ("examples", "regress", REGRESS), values=(2.0,)),
    timeout=60,
  )
  assert [r.WhichOneof("result") for r in both.results] == [
    "classification_result",
    "regression_result",
  ]
  assert both.results[1].regression_result.regressions[0].value == 3.0
  assert [r.model_spec.signature_name for r in both.results] == ["serving_default", "regress"]


def _rest(port, path, body):
  """(HTTP status, JSON answer) of a POST."""
  request = urllib.request.Request(
    f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(), method="POST"
  )
  try:
    with urllib.request.urlopen(request, timeout=60) as response:
      return response.status, json.loads(response.read())
  except urllib.error.HTTPError as error:
    return error.code, json.loads(error.read())


def test_rest_classify_and_regress_run_json_examples_as_grpc_does(served):
  """:classify / :regress (http_rest_api_handler.cc ProcessClassifyRequest): JSON examples
  become tf.Examples (json_tensor.cc MakeExampleFromJsonObject), answered as
  MakeJsonFromClassificationResult / MakeJsonFromRegressionResult write them."""
  port = served[1]
  assert _rest(port, "/v1/models/examples:classify", {"examples": [{"x": 1.0}, {"x": [4.0]}]}) == (
    200,
    {"results": [[["small", 0.9], ["large", 0.1]], [["small", 0.6], ["large", 0.4]]]},
  )
  body = {"signature_name": "regress", "context": {"c": 7.0}, "examples": [{"x": 2.0}]}
  assert _rest(port, "/v1/models/examples:regress", body) == (200, {"results": [3.0]})


# (TF Serving source, body, HTTP status, message start) for :classify on the examples model.
REST_EXAMPLE_ERRORS = [
  (
    "json_tensor.cc:838-842",
    {"instances": [1]},
    400,
    "JSON Value: {\"instances\":[1]} When method is classify, key 'examples' is expected",
  ),
  ("json_tensor.cc:843-847", {"examples": 1}, 400, 'JSON Value: {"examples":1} Expecting'),
  ("json_tensor.cc:848-851", {"examples": []}, 400, "JSON Value: {\"examples\":[]} 'examples'"),
  ("json_tensor.cc:798-800", {"examples": [1]}, 400, "Example must be JSON object but got JSON"),
  (
    "json_tensor.cc:740-743",
    {"examples": [{"x": None}]},
    400,
    "Feature: x has element with unexpected JSON type: Null",
  ),
  (
    "json_tensor.cc:763-766",
    {"examples": [{"x": [[1.0]]}]},
    400,
    "Feature: x has element with unexpected JSON type: Array",
  ),
  (
    "json_tensor.cc:710-732",
    {"examples": [{"x": [1.0, "a"]}]},
    400,
    "Unexpected element type in feature: x expecting type: float",
  ),
  (
    "json_tensor.cc:784-788",
    {"examples": [{"x": 2**64 - 1}]},
    400,
    "Feature: x has uint64_t element. Only int64_t is supported.",
  ),
  (
    "the model's parse_example (an int64 where it reads a float)",
    {"examples": [{"x": 1}]},
    400,
    "Name: <unknown>, Key: x, Index: 0.  Data types don't match.",
  ),
]


@pytest.mark.parametrize(
  "source,body,status,message",
  REST_EXAMPLE_ERRORS,
  ids=[f"{c[0]}-{i}" for i, c in enumerate(REST_EXAMPLE_ERRORS)],
)
def test_rest_classify_reads_json_examples_with_tf_servings_texts(
  served, source, body, status, message
):
  got, answer = _rest(served[1], "/v1/models/examples:classify", body)
  assert (got, answer["error"].startswith(message)) == (status, True), answer


def _config(*models):
  """A ModelServerConfig of (name, base_path, labels) entries."""
  config = model_server_config_pb2.ModelServerConfig()
  for name, base_path, labels in models:
    entry = config.model_config_list.config.add(
      name=name, base_path=base_path, model_platform="tensorflow"
    )
    entry.version_labels.update(labels)
  return config


def test_reload_config_adds_relabels_and_removes_models(tmp_path):
  """HandleReloadConfigRequest -> ServerCore::ReloadConfig: new models are AVAILABLE when it
  returns, removed ones are unloaded (status END), labels must name AVAILABLE versions."""
  first = _half_plus_two(tmp_path / "first")
  second = tmp_path / "second"
  shutil.copytree(first, second)
  core = ServerCore([ModelManager("first", str(first))])
  core.start()
  server, ports = grpc_service.make_server(core, ["127.0.0.1:0"], 2)
  client = GrpcServingClient("second", port=ports["127.0.0.1:0"])
  try:
    response = client.reload_config(_config(("first", str(first), {}), ("second", str(second), {})))
    assert response.status.error_code == 0
    assert client.predict({"x": [2.0]})["y"].tolist() == [3.0]
    code, details = _error(client.reload_config, _config(("second", str(second), {"stable": 7})))
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    assert details == (
      "Request to assign label to version 7 of model second, which is not "
      "currently available for inference"
    )
    client.reload_config(_config(("second", str(second), {"stable": 123})))
    assert client.predict({"x": [4.0]}, label="stable")["y"].tolist() == [4.0]
    first_client = GrpcServingClient("first", port=ports["127.0.0.1:0"])
    assert _error(first_client.predict, {"x": [1.0]})[0] == grpc.StatusCode.NOT_FOUND
    assert [s.state for s in first_client.status().model_version_status] == [
      get_model_status_pb2.ModelVersionStatus.END
    ]
    first_client.close()
    for config, message in (
      (
        _config(("x", "relative/path", {})),
        "Expected model x to have an absolute path or URI; got base_path()=relative/path",
      ),
      (model_server_config_pb2.ModelServerConfig(), "Only ModelConfigList is currently supported"),
    ):
      code, details = _error(client.reload_config, config)
      assert code == grpc.StatusCode.INVALID_ARGUMENT and message in details
    code, details = _error(
      client.reload_config, _config(("second", str(second), {}), ("empty", str(tmp_path), {}))
    )
    assert code == grpc.StatusCode.UNKNOWN
    assert details.startswith("1 model(s) did not become available")
  finally:
    client.close()
    server.stop(0).wait()
    core.stop()


def test_both_protocols_under_load_through_a_version_swap_share_batches(tmp_path):
  """REST and gRPC clients at once while version 124 replaces 123, server batching on: no
  request fails, each gets its own rows back, and requests of both protocols share batches."""
  base = _half_plus_two(tmp_path)
  batcher = Batcher(
    BatchingParameters(max_batch_size=16, batch_timeout_micros=5000, num_batch_threads=1)
  )
  mixed = []
  run_batch = batcher._run_batch
  batcher._run_batch = lambda batch: (
    mixed.append({float(t.arrays["x"][0]) for t in batch} == {1.0, 3.0}) or run_batch(batch)
  )
  manager = ModelManager("half_plus_two", str(base), poll_seconds=0.2)
  core = ServerCore([manager], batcher=batcher)
  core.start()
  rest = make_server(core, "127.0.0.1", 0)
  threading.Thread(target=rest.serve_forever, daemon=True).start()
  grpc_server, ports = grpc_service.make_server(core, ["127.0.0.1:0"], 4)
  stop, failures, answered = threading.Event(), [], {"rest": 0, "grpc": 0}

  def rest_load():
    client = ServingClient("half_plus_two", port=rest.server_address[1])
    while not stop.is_set():
      try:
        assert client.predict(instances=[1.0]) == {"predictions": [2.5]}
        answered["rest"] += 1
      except Exception as error:
        failures.append(error)

  def grpc_load():
    client = GrpcServingClient("half_plus_two", port=ports["127.0.0.1:0"])
    while not stop.is_set():
      try:
        assert client.predict({"x": [3.0]})["y"].tolist() == [3.5]
        answered["grpc"] += 1
      except Exception as error:
        failures.append(error)
    client.close()

  threads = [threading.Thread(target=load) for load in [rest_load, grpc_load] * 3]
  for thread in threads:
    thread.start()
  try:
    poll_until(lambda: min(answered.values()) >= 5, "answers on both protocols")
    shutil.copytree(base / "123", base / ".new")
    os.rename(base / ".new", base / "124")  # appears whole, as serving.export writes it
    poll_until(
      lambda: core.status("half_plus_two")["model_version_status"][-1]["state"] == "END",
      "version 123 unloaded",
    )
    after = dict(answered)
    poll_until(lambda: all(answered[p] >= after[p] + 5 for p in after), "answers after the switch")
  finally:
    stop.set()
    for thread in threads:
      thread.join()
    rest.shutdown(0)
    grpc_server.stop(0).wait()
    core.stop()
    batcher.close()
  assert not failures, failures[:3]
  assert answered["rest"] > 0 and answered["grpc"] > 0
  assert [
    (s["version"], s["state"]) for s in core.status("half_plus_two")["model_version_status"]
  ] == [("124", "AVAILABLE"), ("123", "END")]
  assert any(mixed)  # a batch held requests of both protocols
