"""The models one server serves, shared by its REST and gRPC front ends (TF Serving's
ServerCore): a ModelManager per configured model, lookups by model spec (name plus version or
label), status, config reloads, and running a signature (batching, deadline, runtime metric).

Errors are StatusErrors carrying TF Serving's canonical codes and messages; each front end maps
the code to its own status (HTTP or gRPC).
"""

import threading
import time

from absl import logging

from serving.server import model_config
from serving.server.errors import StatusError
from serving.server.model_manager import ModelManager
from serving.tf_serving import versions


def _not_available(model, version):
  return StatusError(
    "FAILED_PRECONDITION",
    f"Request to assign label to version {version} of model {model}, which is "
    "not currently available for inference",
  )


class ServerCore:
  """Models by name, each kept loaded by its ModelManager.

  Args:
    managers: the `ModelManager` of each model.
    poll_seconds: seconds between looks for new versions (for models added by a reload).
    allow_version_labels_for_unavailable_models: accept labels naming versions not served.
    batcher: the `batching.Batcher` that merges concurrent requests (None: each runs alone).
    metrics: the `monitoring.Metrics` requests and loads are counted in (None: not counted).
  """

  def __init__(
    self,
    managers,
    poll_seconds=1.0,
    allow_version_labels_for_unavailable_models=False,
    batcher=None,
    metrics=None,
  ):
    self.poll_seconds = poll_seconds
    self.allow_unavailable_labels = allow_version_labels_for_unavailable_models
    self.batcher, self.metrics = batcher, metrics
    self._managers = {manager.name: manager for manager in managers}
    for manager in managers:  # warm-ups are recorded with the requests
      manager.metrics = manager.metrics or metrics
    self._retired = {}  # models removed by a reload: status still lists their versions (END)
    self._lock = threading.Lock()
    self._reload_lock = threading.Lock()
    self._stopped = threading.Event()

  @classmethod
  def from_configs(cls, configs, poll_seconds=1.0, **options):
    """A core serving the model_config.ModelConfig list `configs` (options: see __init__)."""
    managers = [ModelManager.from_config(config, poll_seconds) for config in configs]
    return cls(managers, poll_seconds, **options)

  def check_labels_on_disk(self):
    """Before anything loads: every label must name a version its model's policy serves from
    what is on disk now (TF Serving checks labels against loaded versions, and nothing is
    loaded at start, so it refuses every label there unless
    --allow_version_labels_for_unavailable_models). Raises model_config.ConfigError."""
    if self.allow_unavailable_labels:
      return
    for name, manager in self._managers.items():
      served = manager.wanted_versions(versions.version_numbers(manager.base_path))
      for label, version in sorted(manager.labels.items()):
        if version not in served:
          raise model_config.ConfigError(
            f"Request to assign label {label} to version {version} of model {name}, which is "
            f"not currently available for inference (served: "
            f"{','.join(map(str, sorted(served))) or 'none'}): serve it with the specific "
            "(or all) version policy, or pass --allow_version_labels_for_unavailable_models"
          )

  def start(self):
    """Loads every model's wanted versions (in config order), then each polls its base path."""
    for manager in list(self._managers.values()):
      manager.start()

  def check_initial_loads(self):
    """After start(): TF Serving does not start unless each model's newest version loaded
    (load_servables_fast.cc ConnectSourcesWithFastInitialLoad): UNKNOWN with its text,
    e.g. `1 servable(s) did not become available: {{{name: m version: 1} due to error:
    INTERNAL: XLA compilation disabled ...}, }` (the list's brace, the entry's, the id's).
    TF Serving first retries a failed load (--max_num_load_retries=5, a minute apart); this
    server does not."""
    failed = []
    for manager in list(self._managers.values()):
      error = manager.latest_load_error()
      if error is not None:
        version, status = error
        failed.append(
          f"{{{{name: {manager.name} version: {version}}} due to error: "
          f"{status['error_code']}: {status['error_message']}}}, "
        )
    if failed:
      raise StatusError(
        "UNKNOWN", f"{len(failed)} servable(s) did not become available: {{{''.join(failed)}}}"
      )

  def stop(self):
    self._stopped.set()
    for manager in list(self._managers.values()):
      manager.stop()

  def watch_config_file(self, path, seconds, served):
    """--model_config_file_poll_wait_seconds: re-reads the file every `seconds` and reloads
    when it changed from `served` (Server::PollFilesystemAndReloadConfig). A file that does not
    parse or a config that fails is logged; the models served stay."""

    def loop(last):
      while not self._stopped.wait(seconds):
        try:
          configs = model_config.read_file(path)
          if configs != last:
            logging.info("%s changed: reloading the model config", path)
            last = configs
            self.reload_config(configs)
        except (model_config.ConfigError, StatusError) as error:
          logging.error("model config %s not applied: %s", path, error)

    threading.Thread(target=loop, args=(served,), name="model-config-poller", daemon=True).start()

  def model_names(self):
    with self._lock:
      return sorted(self._managers)

  def manager(self, name, version=None):
    """The ModelManager serving `name`; NOT_FOUND with TF Serving's servable-request text."""
    with self._lock:
      manager = self._managers.get(name)
    if manager is None:
      spec = f"Specific({name}, {version})" if version is not None else f"Latest({name})"
      raise StatusError("NOT_FOUND", f"Servable not found for request: {spec}")
    return manager

  def servable(self, name, version=None, label=None):
    """ServerCore::GetServableHandle: a label first resolves to a version
    (ServableRequestFromModelSpec), then the servable must be loaded."""
    if not name:
      raise StatusError("INVALID_ARGUMENT", "ModelSpec has no name specified.")
    with self._lock:
      manager = self._managers.get(name)
    if manager is None and label is not None:
      raise StatusError("INVALID_ARGUMENT", f"Unrecognized servable version label: {label}")
    if manager is None:
      self.manager(name, version)  # raises NOT_FOUND
    return manager.servable(version, label)

  def status(self, name, version=None):
    """GetModelStatus of a configured model, or of one a reload removed (its versions END)."""
    with self._lock:
      manager = self._managers.get(name) or self._retired.get(name)
    if manager is None:
      if version is not None:
        raise StatusError("NOT_FOUND", f"Could not find version {version} of model {name}")
      raise StatusError("NOT_FOUND", f"Could not find any versions of model {name}")
    return manager.status(version)

  def run(
    self, servable, signature_name, arrays, api="Predict", timeout_seconds=None, output_names=None
  ):
    """Runs one signature of `servable` (merged with concurrent requests when batching is on)
    and records TF Serving's runtime_latency for it."""
    started = time.perf_counter()
    if self.batcher is not None:
      outputs = self.batcher.run(servable, signature_name, arrays, timeout_seconds, output_names)
    else:
      outputs = servable.run(signature_name, arrays, timeout_seconds, output_names)
    if self.metrics is not None:
      self.metrics.record_runtime(servable.name, api, time.perf_counter() - started)
    return outputs

  def reload_config(self, configs):
    """ServerCore::ReloadConfig for a new list of models: labels are checked first (against
    the versions AVAILABLE now), models no longer listed are unloaded, listed ones take their
    new policy and labels, new ones are loaded before this returns. Raises StatusError."""
    with self._reload_lock:
      with self._lock:
        current = dict(self._managers)
      for config in configs:
        self._check_reload_labels(config, current.get(config.name))
      for name in sorted(set(current) - {c.name for c in configs}):
        logging.info("model %s left the config: unloading it", name)
        current[name].retire()
        with self._lock:
          self._retired[name] = self._managers.pop(name)
      added = []
      for config in configs:
        manager = current.get(config.name)
        if manager is not None and manager.base_path == config.base_path:
          manager.reconfigure(config)
        else:
          if manager is not None:  # a new base path is a new source: start it afresh
            manager.retire()
          manager = ModelManager.from_config(config, self.poll_seconds, self.metrics)
          added.append(manager)
          with self._lock:
            self._managers[config.name] = manager
            self._retired.pop(config.name, None)
      for manager in added:
        manager.start()
      self._check_available(added)

  def _check_reload_labels(self, config, manager):
    """UpdateModelVersionLabelMap: a label must name an AVAILABLE version, unless
    --allow_version_labels_for_unavailable_models (which still refuses moving an existing
    label to a version that is not available)."""
    available = manager.available_versions() if manager is not None else set()
    old_labels = manager.labels if manager is not None else {}
    for label, version in sorted(config.labels.items()):
      moves = label in old_labels and old_labels[label] != version
      if version not in available and not (self.allow_unavailable_labels and not moves):
        raise _not_available(config.name, version)

  @staticmethod
  def _check_available(managers):
    """WaitUntilModelsAvailable: new models that did not load make the reload fail."""
    failed = [m for m in managers if not m.is_available()]
    if not failed:
      return
    parts = []
    for manager in failed:
      errors = [
        f"{{name: {manager.name} version: {v}}} due to error: {s['error_message']}"
        for v, (state, s) in sorted(manager.states().items())
        if s["error_message"]
      ]
      parts.append(", ".join(errors) or f"{{name: {manager.name}}} (no version on disk)")
    raise StatusError(
      "UNKNOWN", f"{len(failed)} model(s) did not become available: {{{', '.join(parts)}}}"
    )
