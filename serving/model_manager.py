"""Loads model versions from a base path the way TF Serving's file-system source does.

* Versions are numeric children of the base path that hold `saved_model.pb`; anything else
  (e.g. a `.tmp-export-*` directory mid-export) is ignored.
* Policy `latest` (default, newest 1), `all`, or `specific` versions.
* The base path is polled; a new version is loaded and warmed up (replaying
  `assets.extra/tf_serving_warmup_requests`) *before* it is served, and an old one is dropped
  only after its replacement is AVAILABLE. Requests in flight hold their own reference to the
  version they started on, so unloading never breaks them.
* A version that fails to load (still being copied, say) is retried on the next poll.
* Status follows TF Serving's ServableStateMonitor: a version is LOADING while it loads and warms
  up, then AVAILABLE; an unloaded version stays listed as END (a failed load too, with its
  error), so `/versions/N` of an unloaded version answers END rather than 404.
"""

import os
import re
import threading

import tensorflow as tf
import tensorflow_text  # noqa: F401  registers the TF-Text ops the SavedModels use
from absl import logging
from google.protobuf import json_format

from serving import check, versions, warmup
from serving.tensor_json import RestError, invalid

# Lines of a TensorFlow error that frame the reason rather than state it.
_ERROR_FRAMING = ("Graph execution error", "Detected at node", "<stack traces unavailable>",
                  "[[{{", "File \"")
_ASSERTION = re.compile(r"assertion failed: \[(.*?)\](?: \[|$)")


def error_reason(message):
  """What a TensorFlow error message says was wrong: a failed assertion's own message (e.g. the
  signatures' token id checks), else its lines without the framing ("Graph execution error:",
  Python stack frames) that eager execution wraps around the runtime's own message."""
  lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
  for line in lines:
    assertion = _ASSERTION.search(line)
    if assertion:
      return assertion.group(1).replace("\\'", "'")[:500]
  reasons = [line for line in lines if not line.startswith(_ERROR_FRAMING)]
  return "\n".join(reasons or lines or ["invalid input"])[:2000]


def error_code(error):
  """The canonical code of a TensorFlow error: InvalidArgumentError -> INVALID_ARGUMENT."""
  name = type(error).__name__
  if isinstance(error, tf.errors.OpError) and name.endswith("Error"):
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name[:-len("Error")]).upper()
  return "INVALID_ARGUMENT"  # ValueError/TypeError: the inputs did not fit the signature


class Servable:
  """One loaded version: callable signatures plus their SignatureDefs for metadata."""

  def __init__(self, name, version, path):
    self.name, self.version, self.path = name, version, path
    self.model = tf.saved_model.load(path, tags=["serve"])
    self.signatures = dict(self.model.signatures)
    meta_graph = next(m for m in check.read_saved_model(path).meta_graphs
                      if "serve" in m.meta_info_def.tags)
    self.signature_defs = meta_graph.signature_def

  def input_specs(self, signature_name):
    function = self.signature(signature_name)
    return function.structured_input_signature[1]

  def signature(self, signature_name):
    if signature_name not in self.signatures:
      raise invalid(f'Serving signature name: "{signature_name}" not found in signature def')
    return self.signatures[signature_name]

  def run(self, signature_name, arrays):
    """{name: numpy array} -> {name: numpy array}; TF errors become 400s, never tracebacks."""
    function = self.signature(signature_name)
    specs = self.input_specs(signature_name)
    try:
      tensors = {name: tf.constant(value, dtype=specs[name].dtype)
                 for name, value in arrays.items()}
      outputs = function(**tensors)
    except (tf.errors.OpError, ValueError, TypeError) as error:
      message = getattr(error, "message", None) or str(error)
      raise RestError(error_code(error), error_reason(message)) from None
    return {name: value.numpy() for name, value in outputs.items()}

  def warm_up(self):
    path = os.path.join(self.path, warmup.WARMUP_FILE)
    if not os.path.exists(path):
      return 0
    records = warmup.read_warmup_file(path)
    for signature_name, inputs in records:
      self.run(signature_name, inputs)
    return len(records)

  def metadata(self):
    signature_def = {
        name: json_format.MessageToDict(sig, preserving_proto_field_name=True,
                                        always_print_fields_with_no_presence=True)
        for name, sig in self.signature_defs.items()}
    return {"model_spec": {"name": self.name, "signature_name": "",
                           "version": str(self.version)},
            "metadata": {"signature_def": {"signature_def": signature_def}}}


def version_directories(base_path):
  """{version: path} of the versions under base_path that hold a SavedModel."""
  return {version: os.path.join(base_path, str(version))
          for version in versions.version_numbers(base_path)}


_OK = {"error_code": "OK", "error_message": ""}


class ModelManager:
  """Keeps the wanted versions of one model loaded; thread-safe lookups for requests."""

  def __init__(self, name, base_path, policy="latest", versions=(), labels=None,
               poll_seconds=1.0):
    if policy not in ("latest", "all", "specific"):
      raise ValueError(f"model version policy must be latest, all or specific, got {policy!r}")
    if policy == "specific" and not versions:
      raise ValueError("policy 'specific' needs at least one version")
    self.name, self.base_path, self.policy = name, base_path, policy
    self.versions = {int(v) for v in versions}
    self.labels = dict(labels or {})
    self.poll_seconds = poll_seconds
    self._servables = {}
    self._states = {}  # version -> (state, status dict), as TF Serving's state monitor keeps
    self._failed = {}
    self._lock = threading.Lock()
    self._stop = threading.Event()
    self._thread = None

  def wanted_versions(self, available):
    """The versions the policy serves out of `available` (an iterable of version numbers)."""
    available = set(available)
    if self.policy == "all":
      return available
    if self.policy == "specific":
      return self.versions & available
    return {max(available)} if available else set()

  def _set_state(self, version, state, status=None):
    with self._lock:
      self._states[version] = (state, status or _OK)

  def _load(self, version, path):
    """Loads and warms up one version; False (and state END with the error) if it failed."""
    if version not in self._failed:
      self._set_state(version, "LOADING")
    try:
      servable = Servable(self.name, version, path)
      warmed = servable.warm_up()
    except Exception as error:  # a half-copied version: try again next poll
      if self._failed.get(version) != str(error):
        logging.warning("version %d of %s not loaded yet: %s", version, self.name, error)
      self._failed[version] = str(error)
      code = error_code(error) if isinstance(error, tf.errors.OpError) else "UNKNOWN"
      self._set_state(version, "END", {"error_code": code,
                                       "error_message": error_reason(str(error))})
      return False
    with self._lock:
      self._servables[version] = servable
      self._states[version] = ("AVAILABLE", _OK)
    self._failed.pop(version, None)
    logging.info("loaded version %d of %s (%d warm-up requests)", version, self.name, warmed)
    return True

  def poll_once(self):
    available = version_directories(self.base_path)
    wanted = self.wanted_versions(available)
    for version in sorted(wanted - set(self._servables)):
      self._load(version, available[version])
    if wanted & set(self._servables) or not wanted:
      # Drop unwanted versions only once something wanted is being served.
      with self._lock:
        for version in sorted(set(self._servables) - wanted):
          logging.info("unloading version %d of %s", version, self.name)
          del self._servables[version]  # requests in flight keep their own reference
          self._states[version] = ("END", _OK)

  def start(self):
    self.poll_once()

    def loop():
      while not self._stop.wait(self.poll_seconds):
        try:
          self.poll_once()
        except Exception:  # keep serving whatever is loaded
          logging.exception("polling %s failed", self.base_path)

    self._thread = threading.Thread(target=loop, name="version-poller", daemon=True)
    self._thread.start()

  def stop(self):
    self._stop.set()

  def servable(self, version=None, label=None):
    """The servable for a request: latest, a version, or a label."""
    if label is not None:
      if label not in self.labels:
        raise invalid(f"Unrecognized servable version label: {label}")
      version = self.labels[label]
    with self._lock:
      if version is None:
        if self._servables:
          return self._servables[max(self._servables)]
        raise RestError("NOT_FOUND", f"Servable not found for request: Latest({self.name})")
      if version in self._servables:
        return self._servables[version]
    raise RestError("NOT_FOUND",
                    f"Servable not found for request: Specific({self.name}, {version})")

  def status(self, version=None):
    """GetModelStatus: every version the manager has seen (newest first), or one of them."""
    with self._lock:
      states = dict(self._states)
    if version is not None:
      if version not in states:
        raise RestError("NOT_FOUND", f"Could not find version {version} of model {self.name}")
      states = {version: states[version]}
    elif not states:
      raise RestError("NOT_FOUND", f"Could not find any versions of model {self.name}")
    return {"model_version_status": [
        {"version": str(v), "state": state, "status": dict(status)}
        for v, (state, status) in sorted(states.items(), reverse=True)]}
