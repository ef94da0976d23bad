"""Classify, Regress and MultiInference as TF Serving runs them under its default flags
(--enable_signature_method_name_check=false, model_servers/server.h): the signature is judged by
its shape, not its method name (classifier.cc PreProcessClassification, regressor.cc
PreProcessRegression); its one input, `inputs`, takes the request's tf.Examples serialized
(util.cc InputToSerializedExampleTensor); the outputs become a ClassificationResult
(`classes` [batch, n] strings, `scores` [batch, n] floats) or a RegressionResult (`outputs`
[batch] or [batch, 1] floats). These exports' signatures are predict-shaped, so for them every
call answers TF Serving's INVALID_ARGUMENT for that shape.

Errors are StatusErrors with TF Serving's codes and texts; the REST and gRPC front ends both
call the checks here.
"""

import numpy as np
import tensorflow as tf
from google.protobuf import text_format
from tensorflow.core.framework import types_pb2
from tensorflow_serving.apis import classification_pb2, inference_pb2, regression_pb2

from serving.errors import StatusError, invalid

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
