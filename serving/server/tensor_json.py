"""TF Serving's JSON <-> tensor rules (its json_tensor.cc), for the REST predict API.

Requests: row format (`instances`) or columnar (`inputs`); strings raw or `{"b64": ...}`.
Responses: `predictions` (row) or `outputs` (columnar); float32 in shortest round-trip form with
`.0` on whole numbers, NaN/Infinity as tokens, string outputs named `*_bytes` as `{"b64": ...}`.
"""

import base64
import json
import math
import re

import numpy as np

from serving.server.errors import StatusError, invalid

_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)
# Which JSON integers each integer dtype takes, as rapidjson's IsInt/IsInt64/IsUint/IsUint64
# decide in TF Serving; int8/int16/uint8 take any int32 and wrap as TensorFlow's proto copy does.
# Keyed by tf.DType.name: this module needs no TensorFlow import (the server checks its flags
# and port before TensorFlow loads).
_INT_RANGES = {
  "int8": _INT32,
  "int16": _INT32,
  "int32": _INT32,
  "uint8": _INT32,
  "int64": _INT64,
  "uint32": (0, 2**32 - 1),
  "uint64": (0, 2**64 - 1),
}
# TensorFlow's DataTypeString names, used in TF Serving's messages.
_DTYPE_NAMES = {"float32": "float", "float64": "double", "float16": "half"}
# numpy holds at most 64 dimensions; no model input needs more than this many.
MAX_RANK = 32
# Integers longer than this are read as floats (rapidjson reads them as doubles), so a
# 4300-digit integer costs no quadratic int() and a float input still gets its value.
_MAX_INT_DIGITS = 20
_DEBUG_CHARS = 256  # TF Serving truncates JSON quoted in error messages to 256 bytes


def dtype_name(dtype):
  return _DTYPE_NAMES.get(dtype.name, dtype.name)


def debug_string(value):
  """Compact JSON of `value` for an error message, cut at 256 characters like TF Serving's."""
  try:
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
  except (RecursionError, ValueError):
    text = "<too deeply nested>"
  return text[:_DEBUG_CHARS]


def json_type(value):
  if value is None:
    return "Null"
  if isinstance(value, bool):
    return "True" if value else "False"
  return {dict: "Object", list: "Array", str: "String"}.get(type(value), "Number")


def _type_error(value, dtype):
  return invalid(
    f"JSON Value: {debug_string(value)} Type: {json_type(value)} is not of "
    f"expected type: {dtype_name(dtype)}"
  )


_TOO_BIG = "Number too big to be stored in double."  # rapidjson's kParseErrorNumberTooBig


def _parse_int(text):
  if len(text.lstrip("-")) <= _MAX_INT_DIGITS:
    return int(text)
  return _parse_float(text)


def _parse_float(text):
  value = float(text)
  if math.isinf(value):  # rapidjson refuses what a double cannot hold (1e400)
    raise ValueError(_TOO_BIG)
  return value


def _first_key_wins(pairs):
  """rapidjson keeps every member and FindMember returns the first: a repeated key's first
  value is the one TF Serving reads (Python's json would keep the last)."""
  obj = {}
  for key, value in pairs:
    obj.setdefault(key, value)
  return obj


_DECODER = json.JSONDecoder(
  parse_int=_parse_int, parse_float=_parse_float, object_pairs_hook=_first_key_wins
)
# kParseNanAndInfFlag also reads Inf, -Inf and -NaN, which Python's json does not: rewritten to
# the spellings it reads, outside strings.
_NAN_AND_INF = re.compile(r'"(?:[^"\\]|\\.)*"|-?Inf(?:inity)?|-NaN')
_SPELLINGS = {"Inf": "Infinity", "-Inf": "-Infinity", "-NaN": "NaN"}


# Python's json messages -> rapidjson's (GetParseError_En), which TF Serving's tests assert.
_PARSE_MESSAGES = {
  "Expecting value": "Invalid value.",
  "Extra data": "The document root must not be followed by other values.",
  "Unterminated string starting at": "Missing a closing quotation mark in string.",
  "Invalid control character at": "Invalid encoding in string.",
  "Invalid \\escape": "Invalid escape character in string.",
  "Invalid \\uXXXX escape": "Incorrect hex digit after \\u escape in string.",
  "Expecting property name enclosed in double quotes": "Missing a name for object member.",
  "Expecting ':' delimiter": "Missing a colon after a name of object member.",
  "Expecting ',' delimiter": "Missing a comma or ']' after an array element.",
}


# Deepest nesting read. TF Serving's iterative parser reads any depth, but no deeper document
# can be a request it serves: a tensor has at most 254 dimensions (TensorShape), under at most
# an object, `instances`/`inputs`, a named input and a {"b64": ...} object. Checked before
# Python's recursive parser runs, so every Python version gives the same answer.
MAX_JSON_DEPTH = 258
_BRACKETS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')  # strings skipped whole
_BOM = "\ufeff"


def _check_depth(text):
  """StatusError when arrays and objects nest deeper than MAX_JSON_DEPTH."""
  if text.count("[") + text.count("{") <= MAX_JSON_DEPTH:  # (the usual case: no scan)
    return
  depth = 0
  for match in _BRACKETS.finditer(text):
    token = match.group(0)
    if token == "[" or token == "{":
      depth += 1
      if depth > MAX_JSON_DEPTH:
        raise invalid(
          f"JSON Parse error: the document is nested too deeply (more than {MAX_JSON_DEPTH} "
          f"levels) at offset: {match.start()}"
        )
    elif token == "]" or token == "}":
      depth -= 1


def parse_json(data):
  """Request body bytes -> a JSON object (dict), read as TF Serving's rapidjson reads it
  (ParseJson: a UTF-8 stream, kParseIterativeFlag | kParseNanAndInfFlag |
  kParseStopWhenDoneFlag, no UTF-8 validation), with its parse error texts. Never raises
  anything but StatusError: nesting past MAX_JSON_DEPTH and huge numbers are 400s.

  So: a UTF-8 byte order mark is skipped (EncodedInputStream, json_tensor.cc:480-482); text
  after the first complete value is ignored; bytes that are not UTF-8 pass through inside
  strings (surrogate-escaped; utf8_bytes turns them back into the same bytes); NaN, Inf, Infinity
  and their negatives are numbers; of a repeated key the first value counts."""
  if not data:
    raise invalid("JSON Parse error: The document is empty")
  text = data.decode("utf-8", "surrogateescape")
  bom = 1 if text.startswith(_BOM) else 0
  # rapidjson's offsets count the mark's three bytes; Python's count it as one character.
  shift = 2 * bom
  start = json.decoder.WHITESPACE.match(text, bom).end()
  if start == len(text):
    raise invalid(f"JSON Parse error: The document is empty. at offset: {start + shift}")
  if "Inf" in text or "-NaN" in text:
    text = _NAN_AND_INF.sub(lambda m: _SPELLINGS.get(m.group(0), m.group(0)), text)
  _check_depth(text)
  try:
    body, _ = _DECODER.raw_decode(text, start)
  except json.JSONDecodeError as error:
    message = _PARSE_MESSAGES.get(error.msg, error.msg)
    raise invalid(f"JSON Parse error: {message} at offset: {error.pos + shift}") from None
  except RecursionError:  # (not reached: _check_depth stops deeper documents first)
    raise invalid("JSON Parse error: the document is nested too deeply") from None
  except ValueError as error:  # a number too big for a double
    raise invalid(f"JSON Parse error: {error}") from None
  if not isinstance(body, dict):
    raise invalid(f"JSON Value: {debug_string(body)} Is not object")
  return body


def utf8_bytes(text):
  """A JSON string's bytes: its UTF-8, with the bytes that were not UTF-8 in the body given
  back as they came (parse_json surrogate-escaped them)."""
  try:
    return text.encode("utf-8", "surrogateescape")
  except UnicodeEncodeError:  # a lone surrogate such as "\ud800" (rapidjson rejects it too)
    raise invalid("JSON Parse error: The surrogate pair in string is invalid.") from None


def b64decode(value):
  """TF Serving's absl::Base64Unescape: standard alphabet, padding optional."""
  try:
    return base64.b64decode(value + "=" * (-len(value) % 4), validate=True)
  except ValueError:
    raise invalid("Unable to base64 decode") from None


def is_b64_object(value):
  return isinstance(value, dict) and len(value) == 1 and isinstance(value.get("b64"), str)


def _convert_scalar(value, dtype):
  """One JSON value -> a Python value of `dtype`, with TF Serving's checks and texts."""
  if isinstance(value, dict):
    if dtype.name != "string":
      raise _type_error(value, dtype)
    if not is_b64_object(value):
      raise invalid(f"JSON Value: {debug_string(value)} not formatted correctly for base64 data")
    return b64decode(value["b64"])
  if dtype.name == "string":
    if not isinstance(value, str):
      raise _type_error(value, dtype)
    return utf8_bytes(value)
  if dtype.name == "bool":
    if not isinstance(value, bool):
      raise _type_error(value, dtype)
    return value
  if dtype.name in ("float32", "float64"):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
      raise _type_error(value, dtype)
    return float(value)  # integers past 20 digits already arrived as floats (_parse_int)
  if dtype.name in _INT_RANGES:
    low, high = _INT_RANGES[dtype.name]
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
      raise _type_error(value, dtype)
    return value
  raise StatusError(
    "UNIMPLEMENTED", f"Conversion of JSON Value: {debug_string(value)} to type: {dtype_name(dtype)}"
  )


def _shape_of(value):
  """GetDenseTensorShape: the lengths of the first lists down the nesting."""
  shape = []
  while isinstance(value, list):
    shape.append(len(value))
    if len(shape) > MAX_RANK:
      raise invalid(
        f"JSON Value: {debug_string(value)} nested more than {MAX_RANK} lists "
        f"deep: a tensor here has at most {MAX_RANK} dimensions"
      )
    if not value:
      break
    value = value[0]
  return shape


def _flatten(value, shape, level, dtype, out):
  """FillTensorProto: depth-first copy into `out`, rejecting ragged lists and mixed levels
  (recursion depth <= MAX_RANK)."""
  if not isinstance(value, list):
    if level != len(shape):
      raise invalid(
        f"JSON Value: {debug_string(value)} found at incorrect level: "
        f"{level + 1} in the JSON DOM. Expected at level: {len(shape)}"
      )
    out.append(_convert_scalar(value, dtype))
    return
  if level >= len(shape):
    raise invalid(f"Encountered list at unexpected level: {level} expected < {len(shape)}")
  if len(value) != shape[level]:
    raise invalid(
      f"Encountered list at unexpected size: {len(value)} at level: {level} "
      f"expected size: {shape[level]}"
    )
  for item in value:
    _flatten(item, shape, level + 1, dtype, out)


def _to_numpy(flat, shape, dtype):
  if dtype.name == "string":
    return np.array(flat, dtype=object).reshape(shape)
  if dtype.name in _INT_RANGES and dtype.size < 4:  # wraps like TF's int_val -> int8/uint8 copy
    return np.array(flat, dtype=np.int64).astype(dtype.as_numpy_dtype).reshape(shape)
  with np.errstate(over="ignore"):  # 1e300 -> inf in float32, as rapidjson's GetFloat()
    return np.array(flat, dtype=dtype.as_numpy_dtype).reshape(shape)


def to_array(value, dtype):
  """A JSON value (scalar or nested lists) -> numpy array of dtype."""
  shape = _shape_of(value)
  flat = []
  _flatten(value, shape, 0, dtype, flat)
  return _to_numpy(flat, shape, dtype)


def _shape_text(shape):
  return "[" + ",".join(str(d) for d in shape) + "]"


def _check_rank(array, spec, name):
  """Catches a wrong rank or fixed size before TensorFlow does; unknown ranks take anything."""
  if spec.shape.rank is None:
    return
  want = spec.shape.as_list()
  if array.ndim != len(want) or any(w is not None and g != w for g, w in zip(array.shape, want)):
    raise invalid(
      f"Input '{name}': expected shape {want} (rank {len(want)}), got shape {list(array.shape)}"
    )


class _RowColumn:
  """One input's values across `instances`, checked as AddInstanceItem checks them."""

  def __init__(self, dtype):
    self.dtype, self.rows, self.shape = dtype, [], None

  def add(self, value):
    array = to_array(value, self.dtype)
    if self.shape is not None:
      if array.size != self.rows[0].size:
        raise invalid(f"Expecting tensor size: {self.rows[0].size} but got: {array.size}")
      if array.shape != self.shape:
        raise invalid(
          f"Expecting shape {_shape_text(self.shape)} but got: {_shape_text(array.shape)}"
        )
    self.shape = array.shape
    self.rows.append(array)

  def array(self):
    return np.stack(self.rows)  # all checked to one shape: adds the batch dimension


def _is_named_object(value):
  return isinstance(value, dict) and not is_b64_object(value)


def _failed(index, error, key=None):
  where = f"{index} key: {key}" if key is not None else f"{index}"
  return StatusError(
    error.code,
    f"Failed to process element: {where} of 'instances' list. Error: {error.code}: {error.message}",
  )


def _parse_instances(instances, input_specs):
  """FillTensorMapFromInstancesList: plain values/lists for one input, or one object per row
  whose keys are the input names (also allowed with one input)."""
  names = set(input_specs)
  objects = _is_named_object(instances[0])
  if not isinstance(instances[0], dict) and len(names) > 1:
    raise invalid(
      "instances is a plain list, but expecting list of objects as multiple "
      "input tensors required as per tensorinfo_map"
    )
  columns = {name: _RowColumn(spec.dtype) for name, spec in input_specs.items()}
  only_name = min(names)  # TF Serving takes the first input of its (sorted) map
  for index, instance in enumerate(instances):
    if objects:
      if not _is_named_object(instance):
        raise invalid(f"Expecting object but got list at item {index} of input list")
      for key, value in instance.items():
        if key not in columns:
          raise _failed(index, invalid(f"JSON object: does not have named input: {key}"), key)
        try:
          columns[key].add(value)
        except StatusError as error:
          raise _failed(index, error, key) from None
      if set(instance) != names:
        raise invalid(
          f"Failed to process element: {index} of 'instances' list. JSON object: "
          f"{debug_string(instance)} keys must be equal to: "
          f"{','.join(sorted(names))}"
        )
    else:
      if _is_named_object(instance):
        raise invalid(f"Expecting value/list but got object at item {index} of input list")
      try:
        columns[only_name].add(instance)
      except StatusError as error:
        raise _failed(index, error) from None
  return {name: column.array() for name, column in columns.items()}


def _parse_inputs(inputs, input_specs):
  """FillTensorMapFromInputsMap: one value/list for one input, else an object naming every
  input (extra keys ignored)."""
  if not isinstance(inputs, dict) or is_b64_object(inputs):
    if len(input_specs) > 1:
      raise invalid(
        "inputs is a plain value/list, but expecting an object as multiple input "
        "tensors required as per tensorinfo_map"
      )
    ((name, spec),) = input_specs.items()
    return {name: to_array(inputs, spec.dtype)}
  arrays = {}
  for name in sorted(input_specs):
    if name not in inputs:
      raise invalid(f"Missing named input: {name} in 'inputs' object.")
    arrays[name] = to_array(inputs[name], input_specs[name].dtype)
  return arrays


def signature_name_of(body):
  """The request's `signature_name` ("" or absent: serving_default), checked like
  FillSignature."""
  name = body.get("signature_name", "")
  if not isinstance(name, str):
    raise invalid(
      f"JSON Value: {debug_string(body)} not formatted correctly. "
      "'signature_name' key must be a string value."
    )
  return name or "serving_default"


def _one_of_error(body):
  return invalid(
    f"JSON Value: {debug_string(body)} Not formatted correctly expecting only "
    "one of 'inputs' or 'instances' keys to exist "
  )


def parse_predict_request(body, input_specs, signature_name=""):
  """body: decoded JSON object; input_specs: {name: tf.TensorSpec}.
  -> ({name: array}, row_format), following FillPredictRequestFromJson."""
  if not input_specs:
    raise invalid(f"Failed to get input map for signature: {signature_name or 'DEFAULT'}")
  if "instances" in body:
    if "inputs" in body:
      raise _one_of_error(body)
    instances = body["instances"]
    if not isinstance(instances, list):
      raise invalid(f"JSON Value: {debug_string(body)} Expecting 'instances' to be an list/array")
    if not instances:
      raise invalid(f"JSON Value: {debug_string(body)} No values in 'instances' array")
    arrays, row_format = _parse_instances(instances, input_specs), True
  elif "inputs" in body:
    arrays, row_format = _parse_inputs(body["inputs"], input_specs), False
  else:
    raise invalid("Missing 'inputs' or 'instances' key")
  for name, array in arrays.items():
    _check_rank(array, input_specs[name], name)
  return arrays, row_format


def float_text(value, is_float32):
  """WriteDecimal: six significant digits (absl::StrCat), all of max_digits10 when those do not
  round-trip, `.0` on whole numbers written without an exponent; NaN, Infinity, -Infinity."""
  value = float(value)
  if math.isnan(value):
    return "NaN"
  if math.isinf(value):
    return "Infinity" if value > 0 else "-Infinity"
  text = f"{value:g}"
  back = float(np.float32(float(text))) if is_float32 else float(text)
  if back != value:
    text = f"{value:.9g}" if is_float32 else f"{value:.17g}"
  return text if "." in text or "e" in text else text + ".0"


def _string_text(value, as_b64):
  if not as_b64:
    try:
      return json.dumps(value.decode("utf-8"), ensure_ascii=False)
    except UnicodeDecodeError:
      pass  # not valid UTF-8: only base64 can carry it in JSON
  return '{"b64": ' + json.dumps(base64.b64encode(value).decode("ascii")) + "}"


# The output dtypes AddSingleValueAndAdvance writes; others (half, bfloat16, uint16, complex,
# ...) fail the answer as TF Serving's does.
_WRITABLE = {
  "float32",
  "float64",
  "int32",
  "int16",
  "int8",
  "uint8",
  "string",
  "object",
  "bytes",
  "int64",
  "bool",
  "uint32",
  "uint64",
}


def _check_writable(name, value):
  kind = value.dtype.name if isinstance(value, np.ndarray) else type(value).__name__
  if kind.startswith(("bytes", "str")):
    return
  if kind not in _WRITABLE:
    raise invalid(f"Failed to write JSON value for tensor type: {_DTYPE_NAMES.get(kind, kind)}")


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
    return float_text(value, isinstance(value, np.float32))
  return str(int(value))


def format_predict_response(outputs, row_format):
  """outputs: {name: numpy array} -> response JSON text (MakeJsonFromTensors)."""
  if not outputs:
    raise invalid("Cannot convert empty tensor map to JSON")
  names = sorted(outputs)
  for name in names:
    _check_writable(name, outputs[name])
  if not row_format:
    if len(names) == 1:
      return '{"outputs": ' + _tensor_text(outputs[names[0]], names[0]) + "}"
    return (
      '{"outputs": {'
      + ",".join(f"{json.dumps(n)}: {_tensor_text(outputs[n], n)}" for n in names)
      + "}}"
    )
  batch_size = None
  for name in names:  # MakeRowFormatJsonFromTensors
    if np.ndim(outputs[name]) == 0:
      raise invalid(f"Tensor name: {name} has no shape information ")
    size = outputs[name].shape[0]
    if batch_size is not None and size != batch_size:
      raise invalid(
        f"Tensor name: {name} has inconsistent batch size: {size} expecting: {batch_size}"
      )
    batch_size = size
  if len(names) == 1:
    return '{"predictions": ' + _tensor_text(outputs[names[0]], names[0]) + "}"
  rows = []
  for i in range(batch_size):
    rows.append(
      "{" + ",".join(f"{json.dumps(n)}: {_tensor_text(outputs[n][i], n)}" for n in names) + "}"
    )
  return '{"predictions": [' + ",".join(rows) + "]}"


def metadata_json(name, version, signature_defs):
  """GetModelMetadata's REST answer (protobuf's JSON mapping; int64 as strings) for the
  {name: SignatureDef} of one version."""
  from google.protobuf import json_format

  signatures = {
    key: json_format.MessageToDict(
      signature, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    for key, signature in signature_defs.items()
  }
  return {
    "model_spec": {"name": name, "signature_name": "", "version": str(version)},
    "metadata": {"signature_def": {"signature_def": signatures}},
  }
