"""The server's one error type: a canonical TensorFlow status code and TF Serving's message.

Every layer (JSON codec, model manager, core, REST and gRPC front ends) raises StatusError;
each front end maps the code to its own status: an HTTP status (HTTP_STATUS, as TF Serving's
http_rest_api_handler maps them) or the gRPC status of the same name.
"""

import json

# HTTP status for each canonical error code, as TF Serving maps them.
HTTP_STATUS = {
  "INVALID_ARGUMENT": 400,
  "FAILED_PRECONDITION": 400,
  "OUT_OF_RANGE": 400,
  "NOT_FOUND": 404,
  "DEADLINE_EXCEEDED": 504,
  "UNIMPLEMENTED": 501,
  "RESOURCE_EXHAUSTED": 429,
  "UNAVAILABLE": 503,
  "ALREADY_EXISTS": 409,
  "ABORTED": 409,
  "PERMISSION_DENIED": 403,
  "UNAUTHENTICATED": 401,
  "CANCELLED": 499,
  "UNKNOWN": 500,
  "INTERNAL": 500,
  "DATA_LOSS": 500,
  # Not a TF status: the server's own request-size cap.
  "PAYLOAD_TOO_LARGE": 413,
}


class StatusError(Exception):
  """An error with a canonical code ("INVALID_ARGUMENT") and TF Serving's message; REST answers
  `{"error": message}` with the code's HTTP status, gRPC the status of the same name.

  Args:
    code: the canonical code's name, e.g. "INVALID_ARGUMENT" or "NOT_FOUND".
    message: TF Serving's message for it.
  """

  def __init__(self, code, message):
    super().__init__(message)
    self.code = code
    self.message = message

  @property
  def http_status(self):
    return HTTP_STATUS.get(self.code, 500)


def invalid(message):
  return StatusError("INVALID_ARGUMENT", message)


def error_body(message):
  """A REST error answer's JSON text."""
  return json.dumps({"error": message})
