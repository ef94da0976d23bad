"""TF Serving's gRPC API on the server's shared ServerCore, on tensorflow-serving-api's own
generated servicers and messages:

  tensorflow.serving.PredictionService  Predict, GetModelMetadata, Classify, Regress,
                                         MultiInference (serving.server.example_apis)
  tensorflow.serving.ModelService       GetModelStatus, HandleReloadConfigRequest

Request tensors are read as Tensor::FromProto reads them (any malformed one: INVALID_ARGUMENT
"tensor parsing error"); answers are written by tf.make_tensor_proto. A call's deadline
bounds the model's run (RunOptions.timeout_in_ms, as prediction_service_impl.cc sets it).
Errors carry TF Serving's canonical code as the gRPC status and its message, cut at 1024
characters as ToGRPCStatus cuts it.
"""

import concurrent.futures
import math
import time

import grpc
import tensorflow as tf
from absl import logging
from google.protobuf.message import DecodeError
from tensorflow.core.protobuf import error_codes_pb2
from tensorflow_serving.apis import (
  classification_pb2,
  get_model_metadata_pb2,
  get_model_status_pb2,
  model_management_pb2,
  model_service_pb2_grpc,
  predict_pb2,
  prediction_service_pb2_grpc,
  regression_pb2,
)

from serving.server import example_apis, model_config
from serving.server.errors import StatusError
from serving.server.example_apis import CLASSIFY_METHOD, REGRESS_METHOD
from serving.server.tensor_json import dtype_name

_MESSAGE_LIMIT = 1024  # grpc_status_util.cc
_INT32_MAX = 2**31 - 1
_SIGNATURE_DEF = "signature_def"  # GetModelMetadataImpl::kSignatureDef


def _abort(context, error):
  message = error.message
  if len(message) > _MESSAGE_LIMIT:
    message = message[:_MESSAGE_LIMIT] + "...TRUNCATED"
  code = getattr(grpc.StatusCode, error.code, grpc.StatusCode.UNKNOWN)
  context.abort(code, message)


def _internal(api, error):
  """A bug answers INTERNAL with its text (logged with its traceback), never grpcio's UNKNOWN
  "Exception calling application"."""
  logging.exception("%s failed", api)
  return StatusError("INTERNAL", f"{type(error).__name__}: {str(error)[:300]}")


def _spec(model_spec):
  """(name, version or None, label or None) of a ModelSpec (its version_choice oneof)."""
  choice = model_spec.WhichOneof("version_choice")
  version = model_spec.version.value if choice == "version" else None
  label = model_spec.version_label if choice == "version_label" else None
  return model_spec.name, version, label


# TensorShape::IsValid: at most this many dimensions.
_MAX_DIMS = 254
# Types a request tensor cannot hold (handles and variants live in the graph, not in requests).
_NOT_REQUEST_TYPES = ("resource", "variant")


def parse_tensor(alias, proto, max_bytes):
  """A request TensorProto -> numpy array, as Tensor::FromProto reads it (TensorFlow's own
  parser runs it: tf.io.parse_tensor), or INVALID_ARGUMENT "tensor parsing error: <alias>"
  (cc/saved_model/util.cc GetInputValues) for anything it refuses: an unknown or unset dtype, a
  shape with an unknown rank, a negative size or more than 254 dimensions, content of the wrong
  length. A tensor of more than `max_bytes` is refused the same way before anything is
  allocated (TF Serving would try to allocate it: a few bytes of shape can ask for terabytes).
  """
  failed = StatusError("INVALID_ARGUMENT", f"tensor parsing error: {alias}")
  try:
    dtype = tf.dtypes.as_dtype(proto.dtype)
  except TypeError:
    raise failed from None
  if proto.dtype == 0 or dtype._is_ref_dtype or dtype.name in _NOT_REQUEST_TYPES:
    raise failed
  shape = proto.tensor_shape
  if shape.unknown_rank or len(shape.dim) > _MAX_DIMS or any(d.size < 0 for d in shape.dim):
    raise failed
  elements = math.prod(d.size for d in shape.dim)
  element_bytes = 8 if dtype == tf.string else dtype.size  # a string: at least a pointer
  if elements * element_bytes > max_bytes:
    raise failed
  try:
    if proto.tensor_content and dtype != tf.string and not dtype.is_quantized:
      # The bytes as they are (FromProto copies them, when exactly the tensor's size): read
      # directly, as tf.io.parse_tensor would after a copy of the whole message (a 16 MiB
      # float tensor: 3 ms this way, 59 ms that way).
      if len(proto.tensor_content) != elements * dtype.size:
        raise failed
      return tf.make_ndarray(proto)
    return tf.io.parse_tensor(proto.SerializeToString(), dtype).numpy()
  except (tf.errors.OpError, ValueError, TypeError):
    raise failed from None


def _check_dtype(alias, array, spec, index):
  """A parsed input against its signature's dtype, with the Session's feed message."""
  if spec is not None and array.dtype != spec.dtype.as_numpy_dtype:
    got = tf.dtypes.as_dtype(array.dtype)
    raise StatusError(
      "INVALID_ARGUMENT",
      f"Expects arg[{index}] to be {dtype_name(spec.dtype)} but {dtype_name(got)} is provided "
      f"(input {alias})",
    )


def _output_names(signature, output_filter):
  """PreProcessPrediction's output_filter checks: known aliases, each at most once."""
  names = []
  for alias in output_filter:
    if alias not in signature.output_tensors:
      raise StatusError(
        "INVALID_ARGUMENT",
        f"output tensor alias not found in signature: {alias} Outputs expected "
        f"to be in the set {{{','.join(sorted(signature.output_tensors))}}}.",
      )
    if alias in names:
      raise StatusError("INVALID_ARGUMENT", f"duplicate output tensor alias: {alias}")
    names.append(alias)
  return names


class PredictionService(prediction_service_pb2_grpc.PredictionServiceServicer):
  """tensorflow.serving.PredictionService on a ServerCore.

  Args:
    core: the `ServerCore` whose models answer.
    metrics: the `monitoring.Metrics` each request is counted in (None: not counted).
    max_tensor_bytes: the largest tensor a request may carry (larger: INVALID_ARGUMENT).
  """

  def __init__(self, core, metrics=None, max_tensor_bytes=4 * _INT32_MAX):
    self.core, self.metrics, self.max_tensor_bytes = core, metrics, max_tensor_bytes

  def _counted(self, api, request, context, handler):
    """Runs handler(request, context) and records request_count/request_latency as
    prediction_service_impl.cc does (entrypoint GRPC)."""
    started, code = time.perf_counter(), "OK"
    try:
      return handler(request, context)
    except StatusError as error:
      code = error.code
      _abort(context, error)
    except Exception as error:
      code = "INTERNAL"
      _abort(context, _internal(api, error))
    finally:
      if self.metrics is not None:
        self.metrics.record_request(
          request.model_spec.name, api, "GRPC", code, time.perf_counter() - started
        )

  def Predict(self, request, context):
    return self._counted("Predict", request, context, self._predict)

  def _predict(self, request, context):
    if not request.HasField("model_spec"):
      raise StatusError("INVALID_ARGUMENT", "Missing ModelSpec")
    name, version, label = _spec(request.model_spec)
    servable = self.core.servable(name, version, label)
    signature_name = request.model_spec.signature_name or "serving_default"
    signature = servable.signatures.get(signature_name)
    if signature is None:  # RunPredict
      raise StatusError(
        "FAILED_PRECONDITION", f'Serving signature key "{signature_name}" not found.'
      )
    # TF Serving's order: the aliases (VerifyRequestInputsSize, GetInputValues), each tensor
    # parsed (FromProto), then the Session's feed checks (dtypes).
    signature.check_inputs(request.inputs)
    order = sorted(signature.input_specs)
    arrays = {}
    for alias in order:
      if alias in request.inputs:
        arrays[alias] = parse_tensor(alias, request.inputs[alias], self.max_tensor_bytes)
    for alias, array in arrays.items():
      _check_dtype(alias, array, signature.input_specs[alias], order.index(alias))
    # The client's deadline (None when it set none) bounds the run.
    outputs = self.core.run(
      servable,
      signature_name,
      arrays,
      "Predict",
      context.time_remaining(),
      _output_names(signature, request.output_filter),
    )
    response = predict_pb2.PredictResponse()
    response.model_spec.name = servable.name
    response.model_spec.version.value = servable.version
    response.model_spec.signature_name = signature_name
    for alias, value in outputs.items():
      response.outputs[alias].CopyFrom(tf.make_tensor_proto(value))
    return response

  def GetModelMetadata(self, request, context):
    try:
      return self._metadata(request)
    except StatusError as error:
      _abort(context, error)
    except Exception as error:
      _abort(context, _internal("GetModelMetadata", error))

  def _metadata(self, request):
    """GetModelMetadataImpl: the signature_def field only, as a packed SignatureDefMap."""
    if not request.HasField("model_spec"):
      raise StatusError("INVALID_ARGUMENT", "Missing ModelSpec")
    if not request.metadata_field:
      raise StatusError(
        "INVALID_ARGUMENT", "GetModelMetadataRequest must specify at least one metadata_field"
      )
    for field in request.metadata_field:
      if field != _SIGNATURE_DEF:
        raise StatusError("INVALID_ARGUMENT", f"Metadata field {field} is not supported")
    servable = self.core.servable(*_spec(request.model_spec))
    signatures = get_model_metadata_pb2.SignatureDefMap()
    for name, signature_def in servable.signature_defs.items():
      signatures.signature_def[name].CopyFrom(signature_def)
    response = get_model_metadata_pb2.GetModelMetadataResponse()
    response.model_spec.name = servable.name
    response.model_spec.version.value = servable.version
    response.metadata[_SIGNATURE_DEF].Pack(signatures)
    return response

  def Classify(self, request, context):
    return self._counted("Classify", request, context, self._example_api(CLASSIFY_METHOD))

  def Regress(self, request, context):
    return self._counted("Regress", request, context, self._example_api(REGRESS_METHOD))

  def _example_api(self, method):
    """classification_service.cc / regression_service.cc, then RunClassify / RunRegress."""

    def handler(request, context):
      if not request.HasField("model_spec"):
        raise StatusError("INVALID_ARGUMENT", "Missing ModelSpec")
      servable = self.core.servable(*_spec(request.model_spec))
      signature_name = request.model_spec.signature_name
      result = example_apis.run(
        self.core, servable, signature_name, method, request.input, context.time_remaining()
      )
      response = (
        classification_pb2.ClassificationResponse()
        if method == CLASSIFY_METHOD
        else regression_pb2.RegressionResponse()
      )
      response.model_spec.name = servable.name
      response.model_spec.signature_name = signature_name or example_apis.DEFAULT_SIGNATURE
      response.model_spec.version.value = servable.version
      response.result.CopyFrom(result)
      return response

    return handler

  def MultiInference(self, request, context):
    # (prediction_service_impl.cc records no request metrics for MultiInference)
    try:
      return example_apis.multi_inference(self.core, request, context.time_remaining())
    except StatusError as error:
      _abort(context, error)
    except Exception as error:
      _abort(context, _internal("MultiInference", error))


class ModelService(model_service_pb2_grpc.ModelServiceServicer):
  """tensorflow.serving.ModelService on a ServerCore.

  Args:
    core: the `ServerCore` whose models' status and reloads it serves.
  """

  def __init__(self, core):
    self.core = core

  def GetModelStatus(self, request, context):
    try:
      if not request.HasField("model_spec"):
        raise StatusError("INVALID_ARGUMENT", "Missing ModelSpec")
      name, version, _ = _spec(request.model_spec)  # the status ignores a label
      status = self.core.status(name, version)
    except StatusError as error:
      _abort(context, error)
    except Exception as error:
      _abort(context, _internal("GetModelStatus", error))
    response = get_model_status_pb2.GetModelStatusResponse()
    for entry in status["model_version_status"]:
      version_status = response.model_version_status.add(
        version=int(entry["version"]),
        state=get_model_status_pb2.ModelVersionStatus.State.Value(entry["state"]),
      )
      version_status.status.error_code = _error_code(entry["status"]["error_code"])
      version_status.status.error_message = entry["status"]["error_message"]
    return response

  def HandleReloadConfigRequest(self, request, context):
    """ServerCore::ReloadConfig with the request's ModelServerConfig; the status goes in the
    response and as the call's status."""
    response = model_management_pb2.ReloadConfigResponse()
    try:
      if request.config.WhichOneof("config") != "model_config_list":
        raise StatusError(
          "INVALID_ARGUMENT",
          "ServerModelConfig type not supported by "
          "HandleReloadConfigRequest. Only ModelConfigList is currently supported",
        )
      try:
        configs = model_config.from_proto(request.config)
      except model_config.ConfigError as error:
        raise StatusError("INVALID_ARGUMENT", str(error)) from None
      self.core.reload_config(configs)
    except StatusError as error:
      response.status.error_code = _error_code(error.code)
      response.status.error_message = error.message
      _abort(context, error)
    return response


class _Malformed:
  """What a request that is not its method's message deserializes to."""

  def __init__(self, reason):
    self.reason = reason


class _MalformedRequests(grpc.ServerInterceptor):
  """A request whose bytes are not the method's message is the client's mistake:
  INVALID_ARGUMENT naming the message type (grpcio's own answer would be INTERNAL, "Exception
  deserializing request!")."""

  def intercept_service(self, continuation, handler_call_details):
    handler = continuation(handler_call_details)
    if handler is None or handler.unary_unary is None or handler.request_deserializer is None:
      return handler
    parse, behaviour = handler.request_deserializer, handler.unary_unary

    def deserialize(data):
      try:
        return parse(data)
      except DecodeError as error:
        return _Malformed(
          f"{handler_call_details.method}: the request is not a "
          f"{parse.__self__.DESCRIPTOR.full_name} ({error})"
        )

    def call(request, context):
      if isinstance(request, _Malformed):
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.reason)
      return behaviour(request, context)

    return handler._replace(request_deserializer=deserialize, unary_unary=call)


def _error_code(name):
  """A canonical code name ("NOT_FOUND") -> tensorflow.error.Code's value (UNKNOWN for a
  code of our own)."""
  known = error_codes_pb2.Code.keys()  # a protobuf enum: `in` works on its keys() only
  return error_codes_pb2.Code.Value(name) if name in known else error_codes_pb2.UNKNOWN


def make_server(
  core, addresses, max_threads, metrics=None, max_receive_bytes=_INT32_MAX, channel_arguments=()
):
  """A started grpc.Server serving both services on `addresses` ("host:port" or
  "unix:path"); returns (server, {address: bound port}). A port that cannot be bound raises
  RuntimeError. Requests up to max_receive_bytes are accepted (larger: RESOURCE_EXHAUSTED),
  answers of any size are sent."""
  options = [
    ("grpc.max_receive_message_length", max_receive_bytes),
    ("grpc.max_send_message_length", _INT32_MAX),
    # Without this, gRPC's default SO_REUSEPORT lets a second server share a busy port.
    ("grpc.so_reuseport", 0),
    *channel_arguments,
  ]
  server = grpc.server(
    concurrent.futures.ThreadPoolExecutor(max_workers=max_threads, thread_name_prefix="grpc"),
    options=options,
    interceptors=[_MalformedRequests()],
  )
  prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(
    # A tensor may expand (a value repeated over its shape) to 4x the message cap, as a REST
    # body may expand by gzip; larger ones are refused before anything is allocated.
    PredictionService(core, metrics, max_tensor_bytes=4 * max_receive_bytes),
    server,
  )
  model_service_pb2_grpc.add_ModelServiceServicer_to_server(ModelService(core), server)
  ports = {}
  for address in addresses:
    port = server.add_insecure_port(address)
    if not port and not address.startswith("unix:"):
      raise RuntimeError(f"cannot listen on {address}")
    ports[address] = port
  server.start()
  return server, ports
