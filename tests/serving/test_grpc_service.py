"""serving.grpc_service through a real grpc server and tensorflow-serving-api's own stubs: the
same models and answers as REST (one ServerCore behind both), TF Serving's status codes and
messages (prediction_service_impl.cc, predict_util.cc, get_model_metadata_impl.cc,
get_model_status_impl.cc, model_service_impl.cc, server_core.cc), deadlines, config reloads."""

import json
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
  predict_pb2,
  regression_pb2,
)
from tensorflow_serving.config import model_server_config_pb2
from test_server_conformance import _half_plus_two

from serving import grpc_service
from serving.client import GrpcServingClient, ServingClient
from serving.model_manager import ModelManager
from serving.monitoring import Metrics
from serving.server import make_server
from serving.server_core import ServerCore

NAME = "numbers"
MAX_MESSAGE = 1 << 20


def _spin_model(base):
  """<base>/1: a TF1 model whose `spin` signature counts to its input `n` in a while loop: a
  model run that only a deadline ends."""
  with tf.Graph().as_default(), tf.compat.v1.Session() as session:
    n = tf.compat.v1.placeholder(tf.int64, shape=[None], name="n")
    count = tf.while_loop(lambda i: i < n[0], lambda i: i + 1, [tf.constant(0, tf.int64)])
    builder = tf.compat.v1.saved_model.Builder(str(base / "1"))
    builder.add_meta_graph_and_variables(session, ["serve"], signature_def_map={
        "serving_default": tf.compat.v1.saved_model.predict_signature_def(
            {"n": n}, {"count": tf.reshape(count, [1])})})
    builder.save()
  return base


@pytest.fixture(scope="module")
def served(exported, tmp_path_factory):
  """(gRPC port, REST port, core, metrics): our export as "numbers", the spinning model as
  "spin", both protocols on one ServerCore."""
  base, _ = exported
  managers = [ModelManager(NAME, str(base)),
              ModelManager("spin", str(_spin_model(tmp_path_factory.mktemp("spin"))))]
  metrics = Metrics()
  core = ServerCore(managers, metrics=metrics)
  core.start()
  grpc_server, ports = grpc_service.make_server(core, ["127.0.0.1:0"], 4, metrics,
                                                max_receive_bytes=MAX_MESSAGE)
  rest = make_server(core, "127.0.0.1", 0, timeout_seconds=0.5, metrics=metrics,
                     metrics_path="/metrics")
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
  assert (response.model_spec.name, response.model_spec.version.value,
          response.model_spec.signature_name) == (NAME, 1, "serving_default")


def test_any_signature_by_name_version_and_output_filter(client):
  ids = client.predict({"source_ids": np.array([[5, 6, 7]], np.int32)},
                       signature_name="translate_ids", version=1)
  assert ids["ids"].dtype == np.int32 and ids["score"].shape == (1,)
  scored = client.predict({"source_ids": np.array([[5, 6]], np.int32),
                           "target_ids": np.array([[7, 2]], np.int32)}, signature_name="score")
  assert set(scored) == {"log_prob"} and scored["log_prob"].shape == (1,)
  only = client.predict({"text": ["12"]}, output_filter=["score"])
  assert set(only) == {"score"}


@pytest.mark.parametrize("change,code,message", [
    # PreProcessPrediction's output_filter checks.
    (lambda r: r.output_filter.append("nope"), grpc.StatusCode.INVALID_ARGUMENT,
     "output tensor alias not found in signature: nope Outputs expected to be in the set "
     "{score,translation}."),
    (lambda r: r.output_filter.extend(["score", "score"]), grpc.StatusCode.INVALID_ARGUMENT,
     "duplicate output tensor alias: score"),
    # RunPredict: an unknown signature.
    (lambda r: setattr(r.model_spec, "signature_name", "nope"),
     grpc.StatusCode.FAILED_PRECONDITION, 'Serving signature key "nope" not found.'),
    # ServerCore: unknown model, version, label.
    (lambda r: setattr(r.model_spec, "name", "nope"), grpc.StatusCode.NOT_FOUND,
     "Servable not found for request: Latest(nope)"),
    (lambda r: r.model_spec.version.__setattr__("value", 9), grpc.StatusCode.NOT_FOUND,
     f"Servable not found for request: Specific({NAME}, 9)"),
    (lambda r: setattr(r.model_spec, "version_label", "canary"),
     grpc.StatusCode.INVALID_ARGUMENT, "Unrecognized servable version label: canary"),
    (lambda r: setattr(r.model_spec, "name", ""), grpc.StatusCode.INVALID_ARGUMENT,
     "ModelSpec has no name specified."),
    # VerifyRequestInputsSize and the session's feed checks.
    (lambda r: r.inputs["extra"].CopyFrom(tf.make_tensor_proto([1])),
     grpc.StatusCode.INVALID_ARGUMENT, "input size does not match signature: 2!=1 "
     "len({extra,text}) != len({text}). Sent extra: {extra}. Missing but required: {}."),
    (lambda r: r.inputs["text"].CopyFrom(tf.make_tensor_proto([1.5])),
     grpc.StatusCode.INVALID_ARGUMENT, "Expects arg[0] to be string but float is provided"),
    (lambda r: r.inputs["text"].CopyFrom(tf.make_tensor_proto([["a"]])),
     grpc.StatusCode.INVALID_ARGUMENT, "Cannot feed value of shape (1, 1)"),
    (lambda r: (r.inputs.clear(), setattr(r.model_spec, "name", "spin"),
                r.inputs["n"].MergeFrom(_int64_proto_with_3_bytes())),
     grpc.StatusCode.INVALID_ARGUMENT, "tensor parsing error: n"),
    # The export's own in-graph checks (a TensorFlow error, its canonical code kept).
    (lambda r: (r.inputs.clear(), setattr(r.model_spec, "signature_name", "translate_ids"),
                r.inputs["source_ids"].CopyFrom(tf.make_tensor_proto(np.array([[5, 5000]],
                                                                               np.int32)))),
     grpc.StatusCode.INVALID_ARGUMENT, "source_ids holds a token id >= the vocabulary size"),
    (lambda r: r.inputs["text"].CopyFrom(tf.make_tensor_proto([b"\xff\xfe"])),
     grpc.StatusCode.INVALID_ARGUMENT, ""),
], ids=["unknown output", "duplicate output", "unknown signature", "unknown model",
        "unknown version", "unknown label", "no name", "extra input", "wrong dtype",
        "wrong rank", "bad tensor proto", "token id check", "invalid utf-8"])
def test_predict_errors_carry_tf_servings_codes_and_messages(client, change, code, message):
  request = _request(text=["12"])
  change(request)
  got_code, details = _error(client.prediction.Predict, request, timeout=60)
  assert got_code == code and message in details, details
  assert client.predict({"text": ["12"]})["translation"].shape == (1,)  # still serving


def _wait_for_count(metrics, model, code, count):
  """Waits (up to 60 s) until request_count{model, code} reaches count."""
  line = f':tensorflow:serving:request_count{{model_name="{model}",status="{code}"}} {count:.1f}'
  deadline = time.time() + 60
  while line not in metrics.page()[1].decode():
    assert time.time() < deadline, metrics.page()[1].decode()[:2000]
    time.sleep(0.05)


def test_a_run_past_the_deadline_is_stopped_on_both_protocols(served, client):
  """A gRPC call's deadline and --rest_api_timeout_in_ms (0.5 s here) end a model run that
  would never finish on its own (RunOptions.timeout_in_ms), and the server keeps serving."""
  spin = GrpcServingClient("spin", port=served[0])
  try:
    code, details = _error(spin.predict, {"n": np.array([10**15])}, timeout=0.5)
    assert code == grpc.StatusCode.DEADLINE_EXCEEDED, details
    # The client gives up at its deadline whatever the server does; the server's own answer
    # (counted once its run has ended) shows the run was stopped there too.
    _wait_for_count(served[3], "spin", "DEADLINE_EXCEEDED", 1)
    assert spin.predict({"n": np.array([10])})["count"].tolist() == [10]
  finally:
    spin.close()
  request = urllib.request.Request(f"http://127.0.0.1:{served[1]}/v1/models/spin:predict",
                                   data=b'{"instances": [1000000000000000]}', method="POST")
  with pytest.raises(urllib.error.HTTPError) as error:
    urllib.request.urlopen(request, timeout=60)
  assert error.value.code == 504 and json.loads(error.value.read())["error"]
  _wait_for_count(served[3], "spin", "DEADLINE_EXCEEDED", 2)
  assert client.predict({"text": ["12"]})["score"].shape == (1,)


def test_messages_over_the_cap_are_refused(client):
  code, _ = _error(client.predict, {"text": ["1" * MAX_MESSAGE]})
  assert code == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_model_metadata_is_the_signature_def_map(served, client):
  signatures = client.metadata()
  servable = served[2].servable(NAME)
  assert signatures == dict(servable.signature_defs)
  assert {"serving_default", "translate_ids", "score", "encode"} <= set(signatures)
  assert signatures["serving_default"].method_name == "tensorflow/serving/predict"
  for fields, message in (([], "GetModelMetadataRequest must specify at least one "
                               "metadata_field"),
                          (["signature_def", "other"], "Metadata field other is not supported")):
    request = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=fields)
    request.model_spec.name = NAME
    assert _error(client.prediction.GetModelMetadata, request) == (
        grpc.StatusCode.INVALID_ARGUMENT, message)
  assert _error(client.prediction.GetModelMetadata,
                get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
                ) == (grpc.StatusCode.INVALID_ARGUMENT, "Missing ModelSpec")


def test_model_status(client):
  status = client.status()
  assert [(s.version, s.state, s.status.error_code, s.status.error_message)
          for s in status.model_version_status] == [
              (1, get_model_status_pb2.ModelVersionStatus.AVAILABLE, 0, "")]
  assert _error(client.status, version=7) == (grpc.StatusCode.NOT_FOUND,
                                              f"Could not find version 7 of model {NAME}")
  assert _error(client.models.GetModelStatus, get_model_status_pb2.GetModelStatusRequest()) == (
      grpc.StatusCode.INVALID_ARGUMENT, "Missing ModelSpec")


def test_classify_regress_and_multi_inference_on_predict_signatures(client):
  """classifier.cc / regressor.cc check the signature's method name; these models export
  predict signatures."""
  classify = classification_pb2.ClassificationRequest()
  classify.model_spec.name = NAME
  assert _error(client.prediction.Classify, classify) == (
      grpc.StatusCode.INVALID_ARGUMENT, "Expected classification signature method_name to be "
      "tensorflow/serving/classify. Was: tensorflow/serving/predict")
  regress = regression_pb2.RegressionRequest()
  regress.model_spec.name = NAME
  assert _error(client.prediction.Regress, regress)[1].startswith(
      "Expected regression signature method_name to be tensorflow/serving/regress.")
  assert _error(client.prediction.MultiInference, inference_pb2.MultiInferenceRequest())[0] == (
      grpc.StatusCode.UNIMPLEMENTED)


def _config(*models):
  """A ModelServerConfig of (name, base_path, labels) entries."""
  config = model_server_config_pb2.ModelServerConfig()
  for name, base_path, labels in models:
    entry = config.model_config_list.config.add(name=name, base_path=base_path,
                                                model_platform="tensorflow")
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
    response = client.reload_config(_config(("first", str(first), {}),
                                            ("second", str(second), {})))
    assert response.status.error_code == 0
    assert client.predict({"x": [2.0]})["y"].tolist() == [3.0]
    code, details = _error(client.reload_config, _config(("second", str(second),
                                                          {"stable": 7})))
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    assert details == ("Request to assign label to version 7 of model second, which is not "
                       "currently available for inference")
    client.reload_config(_config(("second", str(second), {"stable": 123})))
    assert client.predict({"x": [4.0]}, label="stable")["y"].tolist() == [4.0]
    first_client = GrpcServingClient("first", port=ports["127.0.0.1:0"])
    assert _error(first_client.predict, {"x": [1.0]})[0] == grpc.StatusCode.NOT_FOUND
    assert [s.state for s in first_client.status().model_version_status] == [
        get_model_status_pb2.ModelVersionStatus.END]
    first_client.close()
    for config, message in ((_config(("x", "relative/path", {})),
                             "Expected model x to have an absolute path or URI; got "
                             "base_path()=relative/path"),
                            (model_server_config_pb2.ModelServerConfig(),
                             "Only ModelConfigList is currently supported")):
      code, details = _error(client.reload_config, config)
      assert code == grpc.StatusCode.INVALID_ARGUMENT and message in details
    code, details = _error(client.reload_config, _config(("second", str(second), {}),
                                                         ("empty", str(tmp_path), {})))
    assert code == grpc.StatusCode.UNKNOWN
    assert details.startswith("1 model(s) did not become available")
  finally:
    client.close()
    server.stop(0).wait()
    core.stop()
