"""TF Serving warm-up records (`assets.extra/tf_serving_warmup_requests`): a TFRecord of
`tensorflow.serving.PredictionLog` protos (tensorflow-serving-api's own messages), one predict
request each. TF Serving replays at most 1000 of them before a version is AVAILABLE; so does
`serving.server`."""

import os

import tensorflow as tf
from tensorflow_serving.apis import prediction_log_pb2

from serving.tf_serving.versions import ASSETS_EXTRA

# Where TF Serving (and our server) look for them inside a version folder.
WARMUP_FILE = os.path.join(ASSETS_EXTRA, "tf_serving_warmup_requests")
MAX_RECORDS = 1000  # TF Serving reads no more


def prediction_log(model_name, signature_name, inputs) -> bytes:
  """Serialized PredictionLog of a predict request; inputs: name -> numpy/tensor value."""
  log = prediction_log_pb2.PredictionLog()
  request = log.predict_log.request
  request.model_spec.name = model_name
  request.model_spec.signature_name = signature_name
  for name, value in sorted(inputs.items()):
    request.inputs[name].CopyFrom(tf.make_tensor_proto(value))
  return log.SerializeToString()


def parse_prediction_log(record: bytes):
  """-> (signature_name, {input name: numpy array}) of a predict_log record."""
  log = prediction_log_pb2.PredictionLog.FromString(record)
  if log.WhichOneof("log_type") != "predict_log":
    raise ValueError(
      f"warm-up record of type {log.WhichOneof('log_type')}: only predict_log records are replayed"
    )
  request = log.predict_log.request
  inputs = {name: tf.make_ndarray(proto) for name, proto in request.inputs.items()}
  return request.model_spec.signature_name or "serving_default", inputs


def write_warmup_file(path, model_name, requests):
  """requests: [(signature_name, inputs)]; TF Serving reads at most 1000."""
  with tf.io.TFRecordWriter(path) as writer:
    for signature_name, inputs in requests[:MAX_RECORDS]:
      writer.write(prediction_log(model_name, signature_name, inputs))


def read_warmup_file(path):
  return [parse_prediction_log(record.numpy()) for record in tf.data.TFRecordDataset(path)]
