"""Loads model versions from a base path the way TF Serving's file-system source does.

* Versions are numeric children of the base path that hold `saved_model.pb`; anything else
  (e.g. a `.tmp-export-*` directory mid-export) is ignored.
* Policy `latest` (default, newest 1), `all`, or `specific` versions.
* The base path is polled; a new version is loaded and warmed up (replaying
  `assets.extra/tf_serving_warmup_requests`) *before* it is served, and an old one is dropped
  only after its replacement is AVAILABLE. Requests in flight hold their own reference to the
  version they started on, so unloading never breaks them.
* A version that fails to load (still being copied, say) is retried on the next poll.
"""

import os
import re
import threading

import tensorflow as tf
import tensorflow_text  # noqa: F401  registers the TF-Text ops the SavedModels use
from absl import logging
from google.protobuf import json_format

from serving import check, warmup
from serving.tensor_json import RestError, invalid

WARMUP_PATH = os.path.join("assets.extra", "tf_serving_warmup_requests")


# Lines of a TensorFlow error that frame the reason rather than state it.
_ERROR_FRAMING = ("Graph execution error", "Detected at node", "<stack traces unavailable>",
                  "[[{{", "File \"")
_ASSERTION = re.compile(r"assertion failed: \[(.*?)\](?: \[|$)")


def error_reason(message):
  """The line of a TensorFlow error message that says what was wrong: a failed assertion's own
  message (e.g. the signatures' token id checks), else the first line that is not framing such
  as "Graph execution error:"."""
  lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
  for line in lines:
    assertion = _ASSERTION.search(line)
    if assertion:
      return assertion.group(1).replace("\\'", "'")[:500]
  reasons = [line for line in lines if not line.startswith(_ERROR_FRAMING)]
  return (reasons or lines or ["invalid input"])[0][:500]


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
    except (tf.errors.InvalidArgumentError, ValueError, TypeError) as error:
      raise invalid(error_reason(getattr(error, "message", None) or str(error))) from None
    return {name: value.numpy() for name, value in outputs.items()}

  def warm_up(self):
    path = os.path.join(self.path, WARMUP_PATH)
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
  """{version: path} of the complete-looking versions under base_path."""
  found = {}
  try:
    names = os.listdir(base_path)
  except FileNotFoundError:
    return found
  for name in names:
    path = os.path.join(base_path, name)
    if name.isdigit() and os.path.isfile(os.path.join(path, "saved_model.pb")):
      found[int(name)] = path
  return found


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
    self._failed = {}
    self._lock = threading.Lock()
    self._stop = threading.Event()
    self._thread = None

  def _wanted(self, available):
    if self.policy == "all":
      return set(available)
    if self.policy == "specific":
      return self.versions & set(available)
    return {max(available)} if available else set()

  def poll_once(self):
    available = version_directories(self.base_path)
    wanted = self._wanted(available)
    for version in sorted(wanted - set(self._servables)):
      try:
        servable = Servable(self.name, version, available[version])
        warmed = servable.warm_up()
      except Exception as error:  # a half-copied version: try again next poll
        if self._failed.get(version) != str(error):
          logging.warning("version %d of %s not loaded yet: %s", version, self.name, error)
        self._failed[version] = str(error)
        continue
      with self._lock:
        self._servables[version] = servable
      self._failed.pop(version, None)
      logging.info("loaded version %d of %s (%d warm-up requests)", version, self.name, warmed)
    if wanted & set(self._servables) or not wanted:
      # Drop unwanted versions only once something wanted is being served.
      with self._lock:
        for version in sorted(set(self._servables) - wanted):
          logging.info("unloading version %d of %s", version, self.name)
          del self._servables[version]

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
    with self._lock:
      loaded = sorted(self._servables, reverse=True)
    if version is not None:
      if version not in loaded:
        raise RestError("NOT_FOUND", f"Could not find version {version} of model {self.name}")
      loaded = [version]
    elif not loaded:
      raise RestError("NOT_FOUND", f"Could not find any versions of model {self.name}")
    return {"model_version_status": [
        {"version": str(v), "state": "AVAILABLE",
         "status": {"error_code": "OK", "error_message": ""}} for v in loaded]}
