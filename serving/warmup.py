"""TF Serving warm-up records (`assets.extra/tf_serving_warmup_requests`).

The file is a TFRecord of `tensorflow.serving.PredictionLog` protos. The `tensorflow-serving-api`
package pins older TensorFlow releases, so the few fields needed are encoded here directly:
  PredictionLog.predict_log = 6 -> PredictLog.request = 1 -> PredictRequest{model_spec = 1,
  inputs = 2 (map<string, TensorProto>)}; ModelSpec{name = 1, signature_name = 3}.
"""

import os

import tensorflow as tf

# Where TF Serving (and our server) look for them inside a version folder.
ASSETS_EXTRA = "assets.extra"
WARMUP_FILE = os.path.join(ASSETS_EXTRA, "tf_serving_warmup_requests")


def _varint(value):
  out = bytearray()
  while True:
    byte = value & 0x7F
    value >>= 7
    if value:
      out.append(byte | 0x80)
    else:
      out.append(byte)
      return bytes(out)


def _field(number, payload):
  """A length-delimited (wire type 2) field."""
  return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def prediction_log(model_name, signature_name, inputs):
  """Serialized PredictionLog for a predict request; inputs: name -> numpy/tensor value."""
  model_spec = _field(1, model_name.encode()) + _field(3, signature_name.encode())
  request = _field(1, model_spec)
  for name, value in sorted(inputs.items()):
    entry = _field(1, name.encode()) + _field(2, tf.make_tensor_proto(value).SerializeToString())
    request += _field(2, entry)
  return _field(6, _field(1, request))


def _read_varint(data, i):
  """-> (value, index after it)."""
  value, shift = 0, 0
  while True:
    byte = data[i]
    i += 1
    value |= (byte & 0x7F) << shift
    shift += 7
    if byte < 0x80:
      return value, i


def _read_fields(data):
  """Length-delimited fields of a serialized message -> [(field number, bytes)]."""
  fields, i = [], 0
  while i < len(data):
    key, i = _read_varint(data, i)
    if key & 7 != 2:
      raise ValueError("unsupported wire type in warm-up record")
    length, i = _read_varint(data, i)
    fields.append((key >> 3, data[i:i + length]))
    i += length
  return fields


def parse_prediction_log(record):
  """-> (signature_name, {input name: numpy array}) of a predict_log record."""
  predict_log = dict(_read_fields(record))[6]
  request = dict(_read_fields(predict_log))[1]
  signature_name, inputs = "serving_default", {}
  for number, payload in _read_fields(request):
    if number == 1:
      spec = dict(_read_fields(payload))
      signature_name = spec.get(3, b"serving_default").decode() or "serving_default"
    elif number == 2:
      entry = dict(_read_fields(payload))
      proto = tf.make_tensor_proto(0)
      proto.ParseFromString(entry[2])
      inputs[entry[1].decode()] = tf.make_ndarray(proto)
  return signature_name, inputs


def write_warmup_file(path, model_name, requests):
  """requests: [(signature_name, inputs)]; TF Serving reads at most 1000."""
  with tf.io.TFRecordWriter(path) as writer:
    for signature_name, inputs in requests[:1000]:
      writer.write(prediction_log(model_name, signature_name, inputs))


def read_warmup_file(path):
  return [parse_prediction_log(record.numpy()) for record in tf.data.TFRecordDataset(path)]
