"""Loads model versions from a base path the way TF Serving's file-system source does.

* A version is loaded as TF Serving's C++ loader loads it (`Servable`): the `serve` MetaGraph in
  a Session of its own; signatures run by their tensor names, with a deadline.
* Versions are numeric children of the base path that hold `saved_model.pb`; anything else
  (e.g. a `.tmp-export-*` directory mid-export) is ignored.
* Policy `latest` (default, the newest `num_versions`, 1), `all`, or `specific` versions.
* The base path is polled; a new version is loaded and warmed up (replaying
  `assets.extra/tf_serving_warmup_requests`) *before* it is served, and an old one is dropped
  only after its replacement is AVAILABLE. Requests in flight hold their own reference to the
  version they started on, so unloading never breaks them.
* A version that fails to load (still being copied, say) is retried on the next poll (at start,
  `serving.server` stops instead when a model's newest version failed, as TF Serving does:
  ServerCore.check_initial_loads).
* Status follows TF Serving's ServableStateMonitor: a version is LOADING while it loads and warms
  up, then AVAILABLE; an unloaded version stays listed as END (a failed load too, with its
  error), so `/versions/N` of an unloaded version answers END rather than 404.
"""

import contextlib
import logging as std_logging
import math
import os
import re
import threading
import time

import tensorflow as tf
import tensorflow_text  # noqa: F401  registers the TF-Text ops the SavedModels use
from absl import logging

from serving.server.errors import StatusError, invalid
from serving.server.tensor_json import metadata_json
from serving.tf_serving import versions, warmup

# Lines of a TensorFlow error that frame the reason rather than state it.
_ERROR_FRAMING = (
  "Graph execution error",
  "Detected at node",
  "<stack traces unavailable>",
  "[[{{",
  'File "',
)
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


# The lines Python's session wraps around the runtime's message: a header, then where the node
# was defined ("Detected at node ... (most recent call last):", stack frames, "Node: '...'").
_PREAMBLE_END = re.compile(r"^Node: '[^\n]*'$\n?", re.MULTILINE)


def runtime_message(message):
  """A TensorFlow runtime error's text as TF Serving's C++ Session passes it on, whole (e.g. a
  graph Assert's every bracket and its `[[{{node ...}}]]` line): without what Python's session
  puts before it ("Graph execution error:", where the node was defined)."""
  preamble = list(_PREAMBLE_END.finditer(message))
  if preamble:
    message = message[preamble[-1].end() :]
  elif message.startswith("Graph execution error:"):
    message = message[len("Graph execution error:") :]
  return message.strip("\n")[:4000]


def error_code(error):
  """The canonical code of a TensorFlow error: InvalidArgumentError -> INVALID_ARGUMENT."""
  name = type(error).__name__
  if isinstance(error, tf.errors.OpError) and name.endswith("Error"):
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name[: -len("Error")]).upper()
  return "INVALID_ARGUMENT"  # ValueError/TypeError: the inputs did not fit the signature


class Signature:
  """One SignatureDef, run by tensor names as TF Serving runs it: {alias: TensorSpec} of its
  dense inputs and the graph tensors behind every input and output alias.

  Args:
    name: the signature's key in the MetaGraph (e.g. "serving_default").
    signature_def: its `SignatureDef` proto.
  """

  def __init__(self, name, signature_def):
    self.name, self.method_name = name, signature_def.method_name
    self.input_specs, self.input_tensors, self.output_tensors = {}, {}, {}
    for side, infos in (("input", signature_def.inputs), ("output", signature_def.outputs)):
      for alias, info in infos.items():
        if info.WhichOneof("encoding") != "name":
          continue  # sparse or composite: refused below when a request names it
        if side == "input":
          self.input_specs[alias] = tf.TensorSpec(
            tf.TensorShape(info.tensor_shape), tf.as_dtype(info.dtype)
          )
          self.input_tensors[alias] = info.name
        else:
          self.output_tensors[alias] = info.name
    self.unsupported = sorted(set(signature_def.inputs) - set(self.input_tensors))
    self.defaults = dict(signature_def.defaults)  # {alias: TensorProto} of optional inputs

  def check_inputs(self, aliases):
    """The request's input aliases against the signature, with TF Serving's messages: the
    count first (predict_util.cc VerifyRequestInputsSize), then each signature input in turn
    (cc/saved_model/util.cc GetInputValues): present, or given a default by the signature."""
    aliases, expected = set(aliases), set(self.input_tensors) | set(self.unsupported)
    if len(aliases) > len(expected) or (len(aliases) < len(expected) and not self.defaults):
      raise invalid(
        f"input size does not match signature: {len(aliases)}!={len(expected)} "
        f"len({{{','.join(sorted(aliases))}}}) != len({{{','.join(sorted(expected))}}}). "
        f"Sent extra: {{{','.join(sorted(aliases - expected))}}}. "
        f"Missing but required: {{{','.join(sorted(expected - aliases))}}}."
      )
    for alias in sorted(expected):
      if alias not in aliases and alias not in self.defaults:
        raise invalid(
          f"Signature input alias: {alias}(feed name: {self.input_tensors.get(alias, '')}) not "
          "found in request and no default value provided. Inputs expected to be in the "
          f"request {{{','.join(sorted(aliases))}}}, or default input alias set: "
          f"{','.join(sorted(self.defaults))}"
        )
    unknown = aliases - expected
    if unknown:
      raise invalid(
        "Inputs contains invalid name. Used request inputs: "
        f"{','.join(sorted(aliases & expected))}, request input: {','.join(sorted(aliases))}"
      )

  def with_defaults(self, arrays):
    """arrays plus the signature's default for each input the request left out."""
    missing = {a: tf.make_ndarray(p) for a, p in self.defaults.items() if a not in arrays}
    return {**arrays, **missing}


class Servable:
  """One loaded version, as TF Serving's SavedModelBundle holds it: the MetaGraph tagged
  `serve` loaded into its own Session (variables restored, init op run, asset paths fed), and
  signatures run by tensor names with RunOptions (a deadline). Any signature works; none is
  known by name.

  Args:
    name: the model's name.
    version: the version number (its folder under the base path).
    path: the version's directory (holding saved_model.pb).
  """

  def __init__(self, name, version, path):
    self.name, self.version, self.path = name, version, path
    self.graph = tf.Graph()
    # Soft placement: an export made on a GPU machine still loads on a CPU-only one.
    self.session = tf.compat.v1.Session(
      graph=self.graph, config=tf.compat.v1.ConfigProto(allow_soft_placement=True)
    )
    with self.graph.as_default(), _quiet_deprecation():
      meta_graph = tf.compat.v1.saved_model.load(self.session, ["serve"], path)
    self.signature_defs = meta_graph.signature_def
    self.signatures = {name: Signature(name, sig) for name, sig in self.signature_defs.items()}

  def input_specs(self, signature_name):
    return self.signature(signature_name).input_specs

  def signature(self, signature_name):
    if signature_name not in self.signatures:
      raise invalid(f'Serving signature name: "{signature_name}" not found in signature def')
    return self.signatures[signature_name]

  def run(self, signature_name, arrays, timeout_seconds=None, output_names=None):
    """{input alias: numpy array} -> {output alias: numpy array} (all outputs, or
    `output_names`); TF errors become StatusErrors with their canonical code, never tracebacks.
    A run past `timeout_seconds` is stopped: DEADLINE_EXCEEDED."""
    signature = self.signature(signature_name)
    if signature.unsupported:
      raise invalid(
        f"Signature {signature_name} has sparse or composite inputs "
        f"({', '.join(signature.unsupported)}): only dense tensors are served"
      )
    signature.check_inputs(arrays)
    arrays = signature.with_defaults(arrays)
    names = list(output_names) if output_names else sorted(signature.output_tensors)
    fetches = {name: signature.output_tensors[name] for name in names}
    feeds = {signature.input_tensors[name]: value for name, value in arrays.items()}
    options = None
    if timeout_seconds is not None:
      if timeout_seconds <= 0:
        raise StatusError("DEADLINE_EXCEEDED", "Deadline exceeded before the model ran")
      options = tf.compat.v1.RunOptions(timeout_in_ms=max(1, math.ceil(timeout_seconds * 1e3)))
    try:
      return self.session.run(fetches, feeds, options=options)
    except tf.errors.OpError as error:
      raise StatusError(error_code(error), runtime_message(error.message)) from None
    except (ValueError, TypeError) as error:  # a value the placeholder cannot take
      raise StatusError("INVALID_ARGUMENT", error_reason(str(error))) from None

  def warm_up(self):
    path = os.path.join(self.path, warmup.WARMUP_FILE)
    if not os.path.exists(path):
      return 0
    records = warmup.read_warmup_file(path)
    for signature_name, inputs in records:
      self.run(signature_name, inputs)
    return len(records)

  def metadata(self):
    return metadata_json(self.name, self.version, self.signature_defs)


@contextlib.contextmanager
def _quiet_deprecation():
  """tf.compat.v1.saved_model.load is TF Serving's loading path, not a mistake: its deprecation
  warning would only tell the operator to use the TF2 loader."""
  logger = tf.get_logger()
  level = logger.level
  logger.setLevel(std_logging.ERROR)
  try:
    yield
  finally:
    logger.setLevel(level)


def version_directories(base_path):
  """{version: path} of the versions under base_path that hold a SavedModel."""
  return {
    version: os.path.join(base_path, str(version))
    for version in versions.version_numbers(base_path)
  }


_OK = {"error_code": "OK", "error_message": ""}


class ModelManager:
  """Keeps the wanted versions of one model loaded; thread-safe lookups for requests.

  Args:
    name: the model's name in URLs and gRPC model specs.
    base_path: the directory of numeric version folders.
    policy: "latest" (the newest `num_versions`), "all" or "specific" (`versions`).
    versions: with policy "specific", the version numbers to serve.
    labels: {label: version} for /labels/ URLs and version_label requests.
    poll_seconds: seconds between looks for new versions (0: look once).
    num_versions: with policy "latest", how many of the newest versions.
    metrics: the `monitoring.Metrics` loads and warm-ups are recorded in (None: none).
  """

  def __init__(
    self,
    name,
    base_path,
    policy="latest",
    versions=(),
    labels=None,
    poll_seconds=1.0,
    num_versions=1,
    metrics=None,
  ):
    self.name, self.base_path, self.metrics = name, base_path, metrics
    self._configure(policy, versions, num_versions, labels)
    self.poll_seconds = poll_seconds
    self._servables = {}
    self._states = {}  # version -> (state, status dict), as TF Serving's state monitor keeps
    self._failed = {}
    self._lock = threading.Lock()
    self._poll_lock = threading.Lock()  # one poll at a time (the poller, a reload)
    self._stop = threading.Event()
    self._wake = threading.Event()
    self._thread = None

  @classmethod
  def from_config(cls, config, poll_seconds=1.0, metrics=None):
    """A manager for a model_config.ModelConfig."""
    return cls(
      config.name,
      config.base_path,
      config.policy,
      config.versions,
      config.labels,
      poll_seconds,
      config.num_versions,
      metrics,
    )

  def _configure(self, policy, versions, num_versions, labels):
    if policy not in ("latest", "all", "specific"):
      raise ValueError(f"model version policy must be latest, all or specific, got {policy!r}")
    if policy == "specific" and not versions:
      raise ValueError("policy 'specific' needs at least one version")
    self.policy, self.versions = policy, {int(v) for v in versions}
    self.num_versions, self.labels = num_versions, dict(labels or {})

  def reconfigure(self, config):
    """A reloaded config for this model (same base path): the new version policy applies at
    the next poll, which starts now; labels apply at once."""
    self._configure(config.policy, config.versions, config.num_versions, config.labels)
    self.base_path = config.base_path
    self._wake.set()

  def wanted_versions(self, available):
    """The versions the policy serves out of `available` (an iterable of version numbers)."""
    available = set(available)
    if self.policy == "all":
      return available
    if self.policy == "specific":
      return self.versions & available
    return set(sorted(available)[-self.num_versions :])

  def _set_state(self, version, state, status=None):
    with self._lock:
      self._states[version] = (state, status or _OK)

  def _load(self, version, path):
    """Loads and warms up one version; False (and state END with the error) if it failed."""
    if version not in self._failed:
      self._set_state(version, "LOADING")
    try:
      servable = Servable(self.name, version, path)
      warmed = self._warm_up(servable)
    except Exception as error:  # a half-copied version: try again next poll
      if self._failed.get(version) != str(error):
        logging.warning("version %d of %s not loaded yet: %s", version, self.name, error)
      self._failed[version] = str(error)
      if isinstance(error, StatusError):  # the warm-up's status, whole (TF Serving's health)
        code, message = error.code, error.message
      else:
        code = error_code(error) if isinstance(error, tf.errors.OpError) else "UNKNOWN"
        message = error_reason(str(error))
      self._set_state(version, "END", {"error_code": code, "error_message": message})
      return False
    with self._lock:
      self._servables[version] = servable
      self._states[version] = ("AVAILABLE", _OK)
    self._failed.pop(version, None)
    logging.info("loaded version %d of %s (%d warm-up requests)", version, self.name, warmed)
    return True

  def _warm_up(self, servable):
    """Replays the version's warm-up records, recording TF Serving's warm-up metrics (for a
    version that has a warm-up file, as saved_model_warmup_util.cc records them)."""
    if not os.path.exists(os.path.join(servable.path, warmup.WARMUP_FILE)):
      return 0
    started = time.perf_counter()
    try:
      records = servable.warm_up()
    except StatusError as error:
      self._record_warmup(servable, error.code, 0, started)
      raise
    self._record_warmup(servable, "OK", records, started)
    return records

  def _record_warmup(self, servable, code, records, started):
    if self.metrics is not None:
      self.metrics.record_warmup(servable.path, code, records, time.perf_counter() - started)

  def poll_once(self):
    with self._poll_lock:
      if self._stop.is_set():
        return
      available = version_directories(self.base_path)
      wanted = self.wanted_versions(available)
      for version in sorted(wanted - set(self._servables)):
        self._load(version, available[version])
      if wanted & set(self._servables) or not wanted:
        # Drop unwanted versions only once something wanted is being served.
        self._unload(set(self._servables) - wanted)

  def _unload(self, unwanted):
    with self._lock:
      for version in sorted(unwanted):
        logging.info("unloading version %d of %s", version, self.name)
        del self._servables[version]  # requests in flight keep their own reference
        self._states[version] = ("END", _OK)

  def start(self):
    """Loads what is wanted now, then polls every poll_seconds (0: never again, as TF
    Serving's --file_system_poll_wait_seconds=0)."""
    self.poll_once()
    if self.poll_seconds <= 0:
      return

    def loop():
      while not self._stop.is_set():
        self._wake.wait(self.poll_seconds)
        self._wake.clear()
        try:
          self.poll_once()
        except Exception:  # keep serving whatever is loaded
          logging.exception("polling %s failed", self.base_path)

    self._thread = threading.Thread(target=loop, name=f"version-poller-{self.name}", daemon=True)
    self._thread.start()

  def stop(self):
    self._stop.set()
    self._wake.set()

  def retire(self):
    """The model left the config: stop polling and unload every version (listed END)."""
    self.stop()
    with self._poll_lock:
      self._unload(set(self._servables))

  def is_available(self):
    with self._lock:
      return bool(self._servables)

  def available_versions(self):
    with self._lock:
      return set(self._servables)

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
        raise StatusError("NOT_FOUND", f"Servable not found for request: Latest({self.name})")
      if version in self._servables:
        return self._servables[version]
    raise StatusError(
      "NOT_FOUND", f"Servable not found for request: Specific({self.name}, {version})"
    )

  def latest_load_error(self):
    """(version, status dict) when the newest version the policy wants ended in an error
    (what TF Serving's start waits on: ServableRequest::Latest), else None."""
    wanted = self.wanted_versions(version_directories(self.base_path))
    states = self.states()
    if not wanted or max(wanted) not in states:
      return None
    state, status = states[max(wanted)]
    return (max(wanted), status) if state == "END" and status["error_code"] != "OK" else None

  def states(self):
    """{version: (state, status dict)} of every version this manager has seen."""
    with self._lock:
      return dict(self._states)

  def status(self, version=None):
    """GetModelStatus: every version the manager has seen (newest first), or one of them."""
    states = self.states()
    if version is not None:
      if version not in states:
        raise StatusError("NOT_FOUND", f"Could not find version {version} of model {self.name}")
      states = {version: states[version]}
    elif not states:
      raise StatusError("NOT_FOUND", f"Could not find any versions of model {self.name}")
    return {
      "model_version_status": [
        {"version": str(v), "state": state, "status": dict(status)}
        for v, (state, status) in sorted(states.items(), reverse=True)
      ]
    }
