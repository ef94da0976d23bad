"""Classify, Regress and MultiInference as TF Serving runs them under its default flags
(--enable_signature_method_name_check=false, model_servers/server.h): the signature is judged by
its shape, not its method name (classifier.cc PreProcessClassification, regressor.cc
PreProcessRegression); its one input, `inputs`, takes the request's tf.Examples serialized
(util.cc InputToSerializedExampleTensor); the outputs become a ClassificationResult
(`classes` [batch, n] strings, `scores` [batch, n] floats) or a RegressionResult (`outputs`
[batch] or [batch, 1] floats). These exports' signatures are predict-shaped, so for them every
call answers TF Serving's INVALID_ARGUMENT for that shape.

REST's :classify and :regress take the same requests as JSON (`examples`, optional `context`:
objects of features, json_tensor.cc MakeExampleFromJsonObject) and answer `{"results": ...}`
(MakeJsonFromClassificationResult / MakeJsonFromRegressionResult). Errors are StatusErrors with
TF Serving's codes and texts.
"""

import json

import numpy as np
import tensorflow as tf
from google.protobuf import text_format
from tensorflow.core.example import feature_pb2
from tensorflow.core.framework import types_pb2
from tensorflow_serving.apis import classification_pb2, inference_pb2, input_pb2, regression_pb2

from serving.server.errors import StatusError, invalid
from serving.server.tensor_json import (
  b64decode,
  debug_string,
  float_text,
  is_b64_object,
  json_type,
  utf8_bytes,
)

CLASSIFY_METHOD = "tensorflow/serving/classify"
REGRESS_METHOD = "tensorflow/serving/regress"
_INPUTS, _CLASSES, _SCORES, _OUTPUTS = "inputs", "classes", "scores", "outputs"
DEFAULT_SIGNATURE = "serving_default"


def _debug_string(signature_def):
  """SignatureDef::DebugString(): protobuf's text format."""
  return text_format.MessageToString(signature_def)


def signature_def(servable, signature_name):
  """GetClassificationSignatureDef / GetRegressionSignatureDef: the named SignatureDef."""
  name = signature_name or DEFAULT_SIGNATURE
  if name not in servable.signature_defs:
    raise invalid(f"No signature was found with the name: {name}")
  return servable.signature_defs[name]


def classification_outputs(signature):
  """PreProcessClassification (classifier.cc:176-222): the output aliases to fetch, `classes`
  and/or `scores`, or INVALID_ARGUMENT saying why the signature cannot classify."""
  if len(signature.inputs) != 1:
    raise invalid("Expected one input Tensor.")
  if len(signature.outputs) not in (1, 2):
    raise invalid(f"Expected one or two output Tensors, found {len(signature.outputs)}")
  if _INPUTS not in signature.inputs:
    raise invalid(f"No classification inputs found in SignatureDef: {_debug_string(signature)}")
  outputs = [alias for alias in (_CLASSES, _SCORES) if alias in signature.outputs]
  if not outputs:
    raise invalid(
      'Expected classification signature outputs to contain at least one of "classes" or '
      f'"scores". Signature was: {_debug_string(signature)}'
    )
  return outputs


def regression_outputs(signature):
  """PreProcessRegression (regressor.cc:170-205): ["outputs"], or INVALID_ARGUMENT."""
  if len(signature.inputs) != 1:
    raise invalid("Expected one input Tensor.")
  if len(signature.outputs) != 1:
    raise invalid("Expected one output Tensor.")
  if _INPUTS not in signature.inputs:
    raise invalid(f"No regression inputs found in SignatureDef: {_debug_string(signature)}")
  if _OUTPUTS not in signature.outputs:
    raise invalid(f"No regression outputs found in SignatureDef: {_debug_string(signature)}")
  return [_OUTPUTS]


def serialized_examples(request_input):
  """InputToSerializedExampleTensor (util.cc:134-211): the Input's tf.Examples serialized, each
  prefixed by the context's bytes for example_list_with_context: a string array [examples]."""
  kind = request_input.WhichOneof("kind")
  if kind == "example_list":
    rows = [e.SerializeToString() for e in request_input.example_list.examples]
  elif kind == "example_list_with_context":
    listed = request_input.example_list_with_context
    context = listed.context.SerializeToString() if listed.HasField("context") else b""
    rows = [context + e.SerializeToString() for e in listed.examples]
  else:
    rows = []
  if not rows:
    raise invalid("Input is empty.")
  return np.array(rows, dtype=object)


def _dtype_name(array):
  """DataType_Name: "DT_INT64"."""
  return types_pb2.DataType.Name(tf.as_dtype(array.dtype).as_datatype_enum)


def _shape_text(array):
  return "[" + ",".join(str(d) for d in array.shape) + "]"


def classification_result(outputs, examples):
  """PostProcessClassificationResult (classifier.cc:224-323): {alias: array} -> the result."""
  classes, scores = outputs.get(_CLASSES), outputs.get(_SCORES)
  for name, array, dtype, dtype_name in (
    (_CLASSES, classes, np.object_, "DT_STRING"),
    (_SCORES, scores, np.float32, "DT_FLOAT"),
  ):
    if array is None:
      continue
    if array.ndim != 2:
      raise invalid(f"Expected Tensor shape: [batch_size num_classes] but got {_shape_text(array)}")
    if array.dtype != dtype:
      raise invalid(f"Expected {name} Tensor of {dtype_name}. Got: {_dtype_name(array)}")
    if array.shape[0] != examples:
      raise invalid(f"Expected {name} output batch size of {examples}. Got: {array.shape[0]}")
  if classes is not None and scores is not None and classes.shape[1] != scores.shape[1]:
    raise invalid(
      "Tensors class and score should match in dim_size(1). Got "
      f"{classes.shape[1]} vs. {scores.shape[1]}"
    )
  count = (classes if classes is not None else scores).shape[1]
  result = classification_pb2.ClassificationResult()
  for row in range(examples):
    classifications = result.classifications.add()
    for column in range(count):
      entry = classifications.classes.add()
      if classes is not None:
        entry.label = classes[row, column].decode("utf-8", "replace")
      if scores is not None:
        entry.score = float(scores[row, column])
  return result


def regression_result(outputs, examples):
  """PostProcessRegressionResult (regressor.cc:208-266): {"outputs": array} -> the result."""
  values = outputs[_OUTPUTS]
  if not (values.ndim == 1 or (values.ndim == 2 and values.shape[1] == 1)):
    raise invalid(
      "Expected output Tensor shape to be either [batch_size] or [batch_size, 1] but got "
      f"{_shape_text(values)}"
    )
  if values.shape[0] != examples:
    raise invalid(
      f"Input batch size did not match output batch size: {examples} vs. {values.shape[0]}"
    )
  if values.dtype != np.float32:
    raise invalid(f"Expected output Tensor of DT_FLOAT.  Got: {_dtype_name(values)}")
  result = regression_pb2.RegressionResult()
  for value in values.reshape([-1]):
    result.regressions.add(value=float(value))
  return result


_KINDS = {
  CLASSIFY_METHOD: (classification_outputs, classification_result, "Classify"),
  REGRESS_METHOD: (regression_outputs, regression_result, "Regress"),
}


def check_signature(servable, signature_name, method):
  """The output aliases a Classify or Regress call on the signature fetches, or TF Serving's
  INVALID_ARGUMENT for a signature of another shape."""
  check = _KINDS[method][0]
  return check(signature_def(servable, signature_name))


def run(core, servable, signature_name, method, request_input, timeout_seconds=None):
  """RunClassify / RunRegress on a servable of `core`: the ClassificationResult or
  RegressionResult for the request's Input."""
  outputs = check_signature(servable, signature_name, method)
  result, api = _KINDS[method][1:]
  examples = serialized_examples(request_input)
  arrays = core.run(
    servable,
    signature_name or DEFAULT_SIGNATURE,
    {_INPUTS: examples},
    api,
    timeout_seconds,
    outputs,
  )
  return result(arrays, len(examples))


def multi_inference(core, request, timeout_seconds=None):
  """RunMultiInference (multi_inference_helper.cc, multi_inference.cc:34-125): every task on
  one model and one version, each signature once, all checked before any runs."""
  model_spec = request.tasks[0].model_spec if request.tasks else None
  name = model_spec.name if model_spec is not None else ""
  version = model_spec.version.value if model_spec and model_spec.HasField("version") else None
  label = model_spec.version_label if model_spec and model_spec.version_label else None
  servable = core.servable(name, version, label)
  model, seen, plan = "", set(), []
  for task in request.tasks:
    if not task.model_spec.name:
      raise invalid("Found ModelSpec with an empty model name.")
    model = model or task.model_spec.name
    if task.model_spec.name != model:
      raise invalid("All ModelSpecs in a MultiInferenceRequest must access the same model name.")
    signature_name = task.model_spec.signature_name or DEFAULT_SIGNATURE
    if signature_name in seen:
      raise invalid(f"Duplicate evaluation of signature: {signature_name}")
    seen.add(signature_name)
    if signature_name not in servable.signature_defs:
      raise invalid(f"Requested signature not found in model graph: {signature_name}")
    if task.method_name not in _KINDS:
      raise StatusError("UNIMPLEMENTED", f"Unsupported signature method_name: {task.method_name}")
    check, result, _ = _KINDS[task.method_name]
    plan.append((task, signature_name, check(servable.signature_defs[signature_name]), result))
  examples = serialized_examples(request.input)
  response = inference_pb2.MultiInferenceResponse()
  for task, signature_name, outputs, result in plan:
    arrays = core.run(
      servable, signature_name, {_INPUTS: examples}, "MultiInference", timeout_seconds, outputs
    )
    entry = response.results.add()
    field = (
      entry.classification_result
      if task.method_name == CLASSIFY_METHOD
      else entry.regression_result
    )
    field.CopyFrom(result(arrays, len(examples)))
    entry.model_spec.name = task.model_spec.name
    entry.model_spec.signature_name = signature_name
    entry.model_spec.version.value = servable.version
  return response


# JSON <-> tf.Example for REST (json_tensor.cc:707-862, 1068-1125).
_INT64 = (-(2**63), 2**63 - 1)
_KIND_NAMES = {"bytes_list": "bytes", "float_list": "float", "int64_list": "int64"}


def _add_value(feature, name, value):
  """AddValueToFeature: one JSON value appended to a Feature, whose kind its first value set."""

  def values(kind):
    current = feature.WhichOneof("kind")
    if current not in (None, kind):
      raise invalid(
        f"Unexpected element type in feature: {name} expecting type: {_KIND_NAMES[current]}"
      )
    return getattr(feature, kind).value

  if isinstance(value, bool):
    values("int64_list").append(int(value))
  elif isinstance(value, str):
    values("bytes_list").append(utf8_bytes(value))
  elif is_b64_object(value):
    values("bytes_list").append(b64decode(value["b64"]))
  elif isinstance(value, int) and value <= _INT64[1]:  # rapidjson: an integer, not a double
    values("int64_list").append(value)
  elif isinstance(value, int) and value < 2**64:
    raise invalid(f"Feature: {name} has uint64_t element. Only int64_t is supported.")
  elif isinstance(value, (int, float)):
    values("float_list").append(float(value))
  else:  # null, a nested array, an object that is not {"b64": ...}
    raise invalid(f"Feature: {name} has element with unexpected JSON type: {json_type(value)}")


def _example(value, example):
  """MakeExampleFromJsonObject: {feature: value or [values]} -> example (filled in place)."""
  if not isinstance(value, dict):
    raise invalid(f"Example must be JSON object but got JSON {json_type(value)}")
  for name, content in value.items():
    feature = feature_pb2.Feature()
    for item in content if isinstance(content, list) else [content]:
      _add_value(feature, name, item)
    example.features.feature[name].CopyFrom(feature)


def input_from_json(body):
  """FillClassifyRegressRequestFromJson's Input: `examples` (with `context`, when given, as
  example_list_with_context), with TF Serving's texts (its classify text for both verbs)."""
  request_input = input_pb2.Input()
  if "context" in body:
    _example(body["context"], request_input.example_list_with_context.context)
  examples = body.get("examples")
  if "examples" not in body:
    raise invalid(
      f"JSON Value: {debug_string(body)} When method is classify, key 'examples' is expected "
      "and was not found"
    )
  if not isinstance(examples, list):
    raise invalid(
      f"JSON Value: {debug_string(body)} Expecting 'examples' value to be an list/array"
    )
  if not examples:
    raise invalid(f"JSON Value: {debug_string(body)} 'examples' value is an empty array")
  listed = (
    request_input.example_list_with_context.examples
    if "context" in body
    else request_input.example_list.examples
  )
  for value in examples:
    _example(value, listed.add())
  return request_input


def result_json(result):
  """A ClassificationResult or RegressionResult -> TF Serving's `{"results": ...}` text."""
  if isinstance(result, classification_pb2.ClassificationResult):
    rows = [
      "["
      + ", ".join(f"[{json.dumps(c.label)}, {float_text(c.score, True)}]" for c in row.classes)
      + "]"
      for row in result.classifications
    ]
  else:
    rows = [float_text(r.value, True) for r in result.regressions]
  return '{"results": [' + ", ".join(rows) + "]}"
