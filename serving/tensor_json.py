"""TF Serving's JSON <-> tensor rules (its json_tensor.cc), for the REST predict API.

Requests: row format (`instances`) or columnar (`inputs`); strings raw or `{"b64": ...}`.
Responses: `predictions` (row) or `outputs` (columnar); float32 in shortest round-trip form with
`.0` on whole numbers, NaN/Infinity as tokens, string outputs named `*_bytes` as `{"b64": ...}`.
"""

import base64
import json
import math

import numpy as np
import tensorflow as tf

# HTTP status for each canonical error code, as TF Serving maps them.
HTTP_STATUS = {
    "INVALID_ARGUMENT": 400, "FAILED_PRECONDITION": 400, "OUT_OF_RANGE": 400, "NOT_FOUND": 404,
    "DEADLINE_EXCEEDED": 504, "UNIMPLEMENTED": 501, "RESOURCE_EXHAUSTED": 429,
    "UNAVAILABLE": 503, "ALREADY_EXISTS": 409, "ABORTED": 409, "PERMISSION_DENIED": 403,
    "UNAUTHENTICATED": 401, "CANCELLED": 499, "UNKNOWN": 500, "INTERNAL": 500, "DATA_LOSS": 500,
    # Not a TF status: the server's own request-size cap.
    "PAYLOAD_TOO_LARGE": 413,
}


class RestError(Exception):
  """An error with a canonical code; the server answers `{"error": message}`."""

  def __init__(self, code, message):
    super().__init__(message)
    self.code = code
    self.message = message

  @property
  def http_status(self):
    return HTTP_STATUS.get(self.code, 500)


def invalid(message):
  return RestError("INVALID_ARGUMENT", message)


_INT32 = (-2**31, 2**31 - 1)
_INT64 = (-2**63, 2**63 - 1)
_INT_RANGES = {tf.int8: _INT32, tf.int16: _INT32, tf.int32: _INT32, tf.uint8: _INT32,
               tf.int64: _INT64, tf.uint16: _INT32, tf.uint32: _INT64, tf.uint64: _INT64}


def _convert_scalar(value, dtype, name):
  """One JSON value -> a Python value of `dtype`, with TF Serving's checks."""
  if dtype == tf.string:
    if isinstance(value, str):
      return value.encode("utf-8")
    if isinstance(value, dict):
      if set(value) != {"b64"} or not isinstance(value["b64"], str):
        raise invalid(f"Input '{name}': a string object must be {{\"b64\": \"<base64>\"}}")
      try:
        return base64.b64decode(value["b64"], validate=True)
      except ValueError:
        raise invalid(f"Input '{name}': unable to base64 decode") from None
    raise invalid(f"Input '{name}': expected a string, got {json.dumps(value)[:40]}")
  if dtype == tf.bool:
    if not isinstance(value, bool):
      raise invalid(f"Input '{name}': expected a boolean, got {json.dumps(value)[:40]}")
    return value
  if dtype.is_floating:
    if dtype in (tf.float16, tf.bfloat16):
      raise RestError("UNIMPLEMENTED", f"Input '{name}': dtype {dtype.name} is not supported")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
      raise invalid(f"Input '{name}': expected a number, got {json.dumps(value)[:40]}")
    return float(value)
  if dtype.is_integer:
    if isinstance(value, bool) or not isinstance(value, int):
      raise invalid(f"Input '{name}': expected an integer, got {json.dumps(value)[:40]}")
    low, high = _INT_RANGES.get(dtype, _INT64)
    if not low <= value <= high:
      raise invalid(f"Input '{name}': {value} does not fit {dtype.name}")
    return value
  raise RestError("UNIMPLEMENTED", f"Input '{name}': dtype {dtype.name} is not supported")


def _is_value(x):
  return not isinstance(x, list)


def _shape_of(value):
  shape = []
  while isinstance(value, list):
    shape.append(len(value))
    if not value:
      break
    value = value[0]
  return shape


def _flatten(value, shape, level, dtype, name, out):
  """Depth-first copy into `out`, rejecting ragged lists and mixed levels."""
  if level == len(shape):
    if not _is_value(value):
      raise invalid(f"Input '{name}': list found at incorrect level {level}")
    out.append(_convert_scalar(value, dtype, name))
    return
  if _is_value(value):
    raise invalid(f"Input '{name}': value found at incorrect level {level}, expected a list")
  if len(value) != shape[level]:
    raise invalid(f"Input '{name}': Encountered list at unexpected size: {len(value)} at "
                  f"level {level}, expected {shape[level]}")
  for item in value:
    _flatten(item, shape, level + 1, dtype, name, out)


def to_array(value, dtype, name):
  """A JSON value (scalar or nested lists) -> numpy array of dtype."""
  shape = _shape_of(value)
  flat = []
  _flatten(value, shape, 0, dtype, name, flat)
  np_dtype = object if dtype == tf.string else dtype.as_numpy_dtype
  return np.array(flat, dtype=np_dtype).reshape(shape)


def _check_rank(array, spec, name):
  if spec.shape.rank is not None and array.ndim != spec.shape.rank:
    raise invalid(f"Input '{name}': expected rank {spec.shape.rank} (shape "
                  f"{spec.shape.as_list()}), got shape {list(array.shape)}")
  for got, want in zip(array.shape, spec.shape.as_list()):
    if want is not None and got != want:
      raise invalid(f"Input '{name}': expected shape {spec.shape.as_list()}, got "
                    f"{list(array.shape)}")


def parse_predict_request(body, input_specs):
  """body: decoded JSON; input_specs: {name: tf.TensorSpec}. -> ({name: array}, row_format)."""
  if not isinstance(body, dict):
    raise invalid("Request body must be a JSON object")
  if "instances" in body and "inputs" in body:
    raise invalid("Not both 'instances' and 'inputs' keys may be present in a request")
  if "instances" not in body and "inputs" not in body:
    raise invalid("Missing 'inputs' or 'instances' key")
  names = sorted(input_specs)
  if "instances" in body:
    instances = body["instances"]
    if not isinstance(instances, list) or not instances:
      raise invalid("'instances' must be a non-empty JSON array")
    if len(names) == 1:
      columns = {names[0]: instances}
    else:
      columns = {name: [] for name in names}
      for index, instance in enumerate(instances):
        if not isinstance(instance, dict) or set(instance) != set(names):
          raise invalid(f"instance {index}: expected an object with keys {names}")
        for name in names:
          columns[name].append(instance[name])
    arrays = {name: to_array(columns[name], input_specs[name].dtype, name) for name in names}
    row_format = True
  else:
    inputs = body["inputs"]
    single_value = not isinstance(inputs, dict) or set(inputs) == {"b64"}
    if len(names) == 1 and single_value:
      inputs = {names[0]: inputs}
    elif not isinstance(inputs, dict):
      raise invalid("'inputs' must be an object naming every input")
    arrays = {}
    for name in names:
      if name not in inputs:
        raise invalid(f"Missing named input: {name} in 'inputs' object.")
      arrays[name] = to_array(inputs[name], input_specs[name].dtype, name)
    row_format = False
  for name in names:
    _check_rank(arrays[name], input_specs[name], name)
  return arrays, row_format


def _float_text(value, is_float32):
  value = float(value)
  if math.isnan(value):
    return "NaN"
  if math.isinf(value):
    return "Infinity" if value > 0 else "-Infinity"
  text = str(np.float32(value)) if is_float32 else repr(value)
  return text if any(c in text for c in ".eEn") else text + ".0"


def _string_text(value, as_b64):
  if not as_b64:
    try:
      return json.dumps(value.decode("utf-8"), ensure_ascii=False)
    except UnicodeDecodeError:
      pass  # not valid UTF-8: only base64 can carry it in JSON
  return '{"b64": ' + json.dumps(base64.b64encode(value).decode("ascii")) + "}"


def _tensor_text(value, name):
  """A numpy array or scalar -> JSON text (nested lists)."""
  if isinstance(value, np.ndarray):
    if value.ndim:
      return "[" + ",".join(_tensor_text(item, name) for item in value) + "]"
    value = value[()]
  if isinstance(value, bytes):
    return _string_text(value, name.endswith("_bytes"))
  if isinstance(value, (bool, np.bool_)):
    return "true" if value else "false"
  if isinstance(value, (float, np.floating)):
    return _float_text(value, isinstance(value, (np.float32, np.float16)))
  return str(int(value))


def format_predict_response(outputs, row_format):
  """outputs: {name: numpy array} -> response JSON text."""
  names = sorted(outputs)
  if not row_format:
    if len(names) == 1:
      return '{"outputs": ' + _tensor_text(outputs[names[0]], names[0]) + "}"
    return '{"outputs": {' + ",".join(
        f"{json.dumps(n)}: {_tensor_text(outputs[n], n)}" for n in names) + "}}"
  batch_sizes = {outputs[n].shape[0] if outputs[n].ndim else None for n in names}
  if None in batch_sizes or len(batch_sizes) != 1:
    raise invalid("Row format needs every output to have rank >= 1 and the same batch size; "
                  "use the columnar 'inputs' format")
  if len(names) == 1:
    return '{"predictions": ' + _tensor_text(outputs[names[0]], names[0]) + "}"
  rows = []
  for i in range(batch_sizes.pop()):
    rows.append("{" + ",".join(f"{json.dumps(n)}: {_tensor_text(outputs[n][i], n)}"
                               for n in names) + "}")
  return '{"predictions": [' + ",".join(rows) + "]}"


def error_body(message):
  return json.dumps({"error": message})
