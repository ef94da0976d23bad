"""TF Serving's gRPC API on the server's shared ServerCore, on tensorflow-serving-api's own
generated servicers and messages:

  tensorflow.serving.PredictionService  Predict, GetModelMetadata (Classify and Regress
                                         answer as TF Serving does for predict signatures;
                                         tf.Example inputs and MultiInference: UNIMPLEMENTED)
  tensorflow.serving.ModelService       GetModelStatus, HandleReloadConfigRequest

Tensors travel as TensorProtos (tf.make_ndarray / tf.make_tensor_proto). A call's deadline
bounds the model's run (RunOptions.timeout_in_ms, as prediction_service_impl.cc sets it).
Errors carry TF Serving's canonical code as the gRPC status and its message, cut at 1024
characters as ToGRPCStatus cuts it.
"""

import concurrent.futures
import time

import grpc
import tensorflow as tf
from google.protobuf.message import DecodeError
from tensorflow.core.protobuf import error_codes_pb2
from tensorflow_serving.apis import (
  get_model_metadata_pb2,
  get_model_status_pb2,
  model_management_pb2,
  model_service_pb2_grpc,
  predict_pb2,
  prediction_service_pb2_grpc,
)

from serving import model_config
from serving.server_core import example_api_error
from serving.tensor_json import RestError, dtype_name

_MESSAGE_LIMIT = 1024  # grpc_status_util.cc
_INT32_MAX = 2**31 - 1
_SIGNATURE_DEF = "signature_def"  # GetModelMetadataImpl::kSignatureDef


def _abort(context, error):
  message = error.message
  if len(message) > _MESSAGE_LIMIT:
    message = message[:_MESSAGE_LIMIT] + "...TRUNCATED"
  code = getattr(grpc.StatusCode, error.code, grpc.StatusCode.UNKNOWN)
  context.abort(code, message)


def _spec(model_spec):
  """(name, version or None, label or None) of a ModelSpec (its version_choice oneof)."""
  choice = model_spec.WhichOneof("version_choice")
  version = model_spec.version.value if choice == "version" else None
  label = model_spec.version_label if choice == "version_label" else None
  return model_spec.name, version, label


def _to_array(alias, proto, spec, index):
  """A request TensorProto -> numpy array, refused with TensorFlow's feed messages when its
  dtype is not the signature's."""
  if spec is not None and proto.dtype != spec.dtype.as_datatype_enum:
    got = tf.dtypes.as_dtype(proto.dtype) if proto.dtype else None
    raise RestError(
      "INVALID_ARGUMENT",
      f"Expects arg[{index}] to be {dtype_name(spec.dtype)} but "
      f"{dtype_name(got) if got else 'an unset dtype'} is provided "
      f"(input {alias})",
    )
  try:
    return tf.make_ndarray(proto)
  except (TypeError, ValueError):
    raise RestError("INVALID_ARGUMENT", f"tensor parsing error: {alias}") from None


def _output_names(signature, output_filter):
  """PreProcessPrediction's output_filter checks: known aliases, each at most once."""
  names = []
  for alias in output_filter:
    if alias not in signature.output_tensors:
      raise RestError(
        "INVALID_ARGUMENT",
        f"output tensor alias not found in signature: {alias} Outputs expected "
        f"to be in the set {{{','.join(sorted(signature.output_tensors))}}}.",
      )
    if alias in names:
      raise RestError("INVALID_ARGUMENT", f"duplicate output tensor alias: {alias}")
    names.append(alias)
  return names


class PredictionService(prediction_service_pb2_grpc.PredictionServiceServicer):
  """tensorflow.serving.PredictionService on a ServerCore."""

  def __init__(self, core, metrics=None):
    self.core, self.metrics = core, metrics

  def _counted(self, api, request, context, handler):
    """Runs handler(request, context) and records request_count/request_latency as
    prediction_service_impl.cc does (entrypoint GRPC)."""
    started, code = time.perf_counter(), "OK"
    try:
      return handler(request, context)
    except RestError as error:
      code = error.code
      _abort(context, error)
    finally:
      if self.metrics is not None:
        self.metrics.record_request(
          request.model_spec.name, api, "GRPC", code, time.perf_counter() - started
        )

  def Predict(self, request, context):
    return self._counted("Predict", request, context, self._predict)

  def _predict(self, request, context):
    if not request.HasField("model_spec"):
      raise RestError("INVALID_ARGUMENT", "Missing ModelSpec")
    name, version, label = _spec(request.model_spec)
    servable = self.core.servable(name, version, label)
    signature_name = request.model_spec.signature_name or "serving_default"
    signature = servable.signatures.get(signature_name)
    if signature is None:  # RunPredict
      raise RestError("FAILED_PRECONDITION", f'Serving signature key "{signature_name}" not found.')
    order = sorted(signature.input_specs)
    arrays = {
      alias: _to_array(
        alias,
        proto,
        signature.input_specs.get(alias),
        order.index(alias) if alias in order else len(order),
      )
      for alias, proto in request.inputs.items()
    }
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
    except RestError as error:
      _abort(context, error)

  def _metadata(self, request):
    """GetModelMetadataImpl: the signature_def field only, as a packed SignatureDefMap."""
    if not request.HasField("model_spec"):
      raise RestError("INVALID_ARGUMENT", "Missing ModelSpec")
    if not request.metadata_field:
      raise RestError(
        "INVALID_ARGUMENT", "GetModelMetadataRequest must specify at least one metadata_field"
      )
    for field in request.metadata_field:
      if field != _SIGNATURE_DEF:
        raise RestError("INVALID_ARGUMENT", f"Metadata field {field} is not supported")
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
    return self._counted("Classify", request, context, self._example_api("classify"))

  def Regress(self, request, context):
    return self._counted("Regress", request, context, self._example_api("regress"))

  def _example_api(self, api):
    def handler(request, context):
      servable = self.core.servable(*_spec(request.model_spec))
      raise example_api_error(servable, request.model_spec.signature_name or "serving_default", api)

    return handler

  def MultiInference(self, request, context):
    _abort(
      context,
      RestError("UNIMPLEMENTED", "MultiInference is not implemented by this server: use Predict"),
    )


class ModelService(model_service_pb2_grpc.ModelServiceServicer):
  """tensorflow.serving.ModelService on a ServerCore."""

  def __init__(self, core):
    self.core = core

  def GetModelStatus(self, request, context):
    try:
      if not request.HasField("model_spec"):
        raise RestError("INVALID_ARGUMENT", "Missing ModelSpec")
      name, version, _ = _spec(request.model_spec)  # the status ignores a label
      status = self.core.status(name, version)
    except RestError as error:
      _abort(context, error)
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
        raise RestError(
          "INVALID_ARGUMENT",
          "ServerModelConfig type not supported by "
          "HandleReloadConfigRequest. Only ModelConfigList is currently supported",
        )
      try:
        configs = model_config.from_proto(request.config)
      except model_config.ConfigError as error:
        raise RestError("INVALID_ARGUMENT", str(error)) from None
      self.core.reload_config(configs)
    except RestError as error:
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
    PredictionService(core, metrics), server
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
