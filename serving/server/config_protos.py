"""TF Serving's config messages that tensorflow-serving-api does not ship, declared from their
.proto files (same package, names, field numbers and types) as descriptors in code, so files
written for `tensorflow_model_server` are read by protobuf's own text_format:

  tensorflow.serving.MonitoringConfig   config/monitoring_config.proto (--monitoring_config_file)
  tensorflow.serving.BatchingParameters servables/tensorflow/session_bundle_config.proto
                                        (--batching_parameters_file)

Imports no TensorFlow: the server reads its config files before TensorFlow starts.
"""

from google.protobuf import (
  descriptor_pb2,
  descriptor_pool,
  message_factory,
  text_format,
  wrappers_pb2,
)

_FIELD = descriptor_pb2.FieldDescriptorProto
_TYPES = {"bool": _FIELD.TYPE_BOOL, "string": _FIELD.TYPE_STRING, "int64": _FIELD.TYPE_INT64}

# message -> [(field, number, type or .message type, repeated)], as in TF Serving's .proto files.
_MESSAGES = {
  "PrometheusConfig": [("enable", 1, "bool", False), ("path", 2, "string", False)],
  "MonitoringConfig": [("prometheus_config", 1, ".tensorflow.serving.PrometheusConfig", False)],
  "BatchingParameters": [
    ("max_batch_size", 1, ".google.protobuf.Int64Value", False),
    ("batch_timeout_micros", 2, ".google.protobuf.Int64Value", False),
    ("max_enqueued_batches", 3, ".google.protobuf.Int64Value", False),
    ("num_batch_threads", 4, ".google.protobuf.Int64Value", False),
    ("thread_pool_name", 5, ".google.protobuf.StringValue", False),
    ("allowed_batch_sizes", 6, "int64", True),
    ("pad_variable_length_inputs", 7, "bool", False),
    ("enable_large_batch_splitting", 8, ".google.protobuf.BoolValue", False),
    ("max_execution_batch_size", 9, ".google.protobuf.Int64Value", False),
  ],
}


def _classes():
  file = descriptor_pb2.FileDescriptorProto(
    name="tfattn/tensorflow_serving_configs.proto",
    package="tensorflow.serving",
    syntax="proto3",
    dependency=["google/protobuf/wrappers.proto"],
  )
  for message, fields in _MESSAGES.items():
    proto = file.message_type.add(name=message)
    for name, number, kind, repeated in fields:
      field = proto.field.add(
        name=name, number=number, label=_FIELD.LABEL_REPEATED if repeated else _FIELD.LABEL_OPTIONAL
      )
      if kind.startswith("."):
        field.type, field.type_name = _FIELD.TYPE_MESSAGE, kind
      else:
        field.type = _TYPES[kind]
  pool = descriptor_pool.DescriptorPool()
  pool.AddSerializedFile(wrappers_pb2.DESCRIPTOR.serialized_pb)
  pool.Add(file)
  return {
    message: message_factory.GetMessageClass(
      pool.FindMessageTypeByName(f"tensorflow.serving.{message}")
    )
    for message in _MESSAGES
  }


_CLASSES = _classes()
MonitoringConfig = _CLASSES["MonitoringConfig"]
BatchingParameters = _CLASSES["BatchingParameters"]


def parse(text, message_class):
  """Text format -> a message of message_class; ValueError naming the line on a mistake."""
  try:
    return text_format.Parse(text, message_class())
  except text_format.ParseError as error:
    raise ValueError(f"not a text {message_class.DESCRIPTOR.name}: {error}") from None
