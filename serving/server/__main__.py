"""`python -m serving.server`: TensorFlow Serving's REST and gRPC APIs for machines without
`tensorflow_model_server`. This module is the program: it reads the flags (server_flags), checks
what it can before TensorFlow loads, and assembles the pieces of `serving/server/`, one job each:

  server_core   the models (one ServerCore behind both protocols)
  rest_api      TF Serving's REST API as a WSGI app (routes, status, metadata, predict)
  http_server   HTTP/1.1 for it (waitress: timeouts, connection limit, shutdown)
  grpc_service  PredictionService / ModelService on --port
  monitoring    the Prometheus page, with --monitoring_config_file

Binds 127.0.0.1 unless --rest_api_host/--grpc_host say otherwise. The stand-in imports neither
`tfattn` nor `train` (tests/serving/server/test_server_imports.py). The flags are read once into
a typed `ServerFlags` (`server_flags.read`), handed to each part that needs them.
"""

import cli

import json
import os
import re
import signal
import threading

from absl import logging

from serving.server import server_flags
from serving.server.http_server import bind_socket
from serving.server.rest_api import make_server
from serving.tf_serving.versions import version_numbers


def _parse_labels(text):
  labels = {}
  for item in filter(None, (text or "").split(",")):
    label, _, version = item.partition("=")
    if not label or not version.isdigit():
      raise cli.UsageError(f"--version_labels entries look like stable=3, got {item!r}")
    labels[label] = int(version)
  return labels


def _parse_versions(items):
  if not all(v.strip().isdigit() for v in items):
    raise cli.UsageError(f"--versions takes version numbers like 1,2; got {','.join(items)}")
  return [int(v) for v in items]


def _check_model_base_path(path, flag="--model_base_path"):
  """The versions on disk; a missing or empty base path is a usage error."""
  if not os.path.isdir(path):
    raise cli.UsageError(
      f"{flag} {path} does not exist: pass the --base_path given to python -m serving.export"
    )
  found = version_numbers(path)
  if not found:
    raise cli.UsageError(
      f"{flag} {path} holds no version folder (<N>/saved_model.pb): export "
      f"one first with python -m serving.export --base_path={path}"
    )
  return found


def _model_configs(options, given):
  """The models to serve: --model_config_file's, or the one of --model_name/--model_base_path
  (with --model_version_policy, --versions, --version_labels). Usage errors name the flag."""
  from serving.server import model_config

  if options.model_config_file:
    for name in ("model_version_policy", "versions", "version_labels"):
      if name in given:
        raise cli.UsageError(
          f"--{name} applies to --model_base_path; with --model_config_file "
          "write it in the file (model_version_policy, version_labels)"
        )
    try:
      configs = model_config.read_file(options.model_config_file)
    except model_config.ConfigError as error:
      raise cli.UsageError(f"--model_config_file {options.model_config_file}: {error}") from None
    if not configs:
      raise cli.UsageError(
        f"--model_config_file {options.model_config_file} lists no model: "
        "model_config_list { config { name: ... base_path: ... "
        'model_platform: "tensorflow" } }'
      )
    for config in configs:
      _check_model_base_path(config.base_path, f"model {config.name}: base_path")
    return configs
  if not options.model_base_path:
    raise cli.UsageError(
      "--model_base_path is required: the directory that holds the "
      "exported versions (python -m serving.export --base_path=...), or "
      "give --model_config_file"
    )
  versions = _parse_versions(options.versions)
  if options.model_version_policy == "specific" and not versions:
    raise cli.UsageError("--model_version_policy=specific needs --versions, e.g. --versions=1,2")
  labels = _parse_labels(options.version_labels)
  _check_model_base_path(options.model_base_path)
  return model_config.single_model(
    options.model_name, options.model_base_path, options.model_version_policy, versions, labels
  )


def _batching_parameters(options):
  from serving.server.batching import BatchingParameters

  if not options.batching_parameters_file:
    return BatchingParameters()
  try:
    with open(options.batching_parameters_file) as f:
      return BatchingParameters.from_text_proto(f.read())
  except (OSError, ValueError) as error:
    raise cli.UsageError(f"--batching_parameters_file: {error}") from None


def _metrics_path(options):
  """The Prometheus page's path from --monitoring_config_file (None: no page)."""
  if not options.monitoring_config_file:
    return None
  from serving.server import monitoring

  try:
    return monitoring.read_config(options.monitoring_config_file)
  except ValueError as error:
    raise cli.UsageError(
      f"--monitoring_config_file {options.monitoring_config_file}: {error}"
    ) from None


def _grpc_channel_arguments(options):
  """--grpc_channel_arguments "key=value,..." (values that are integers passed as such)."""
  arguments = []
  for item in filter(None, options.grpc_channel_arguments.split(",")):
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
      raise cli.UsageError(
        f"--grpc_channel_arguments entries look like grpc.max_concurrent_streams=100, got {item!r}"
      )
    value = value.strip()
    arguments.append((key.strip(), int(value) if re.fullmatch(r"-?\d+", value) else value))
  return arguments


def _bind_or_fail(host, port, flag):
  try:
    return bind_socket(host, port)
  except OSError as error:
    raise cli.UsageError(
      f"cannot listen on {host}:{port} ({error.strerror}): pick another "
      f"{flag} (0 picks a free one) or stop what uses it"
    ) from None


def _check_ports(options):
  """Both ports, before TensorFlow starts: REST's socket is kept (it is the server's), gRPC's
  is only tried (grpcio binds its own)."""
  if options.port and options.port == options.rest_api_port:
    raise cli.UsageError(
      f"--rest_api_port and --port are both {options.port}: REST and gRPC need a port each"
    )
  rest = _bind_or_fail(options.rest_api_host, options.rest_api_port, "--rest_api_port")
  if options.port:
    _bind_or_fail(options.grpc_host, options.port, "--port").close()
  return rest


def _url_host(host):
  return f"[{host}]" if ":" in host else host


def _write_port_file(path, ports):
  with open(path + ".tmp", "w") as f:
    json.dump(ports, f)
  os.replace(path + ".tmp", path)


def _stop_on_signals(server, grace_seconds):
  def handler(signum, frame):
    logging.info("signal %d: finishing requests in flight, then stopping", signum)
    threading.Thread(target=server.shutdown, args=(grace_seconds,), daemon=True).start()

  signal.signal(signal.SIGTERM, handler)
  signal.signal(signal.SIGINT, handler)


def _start_grpc(core, metrics, options):
  """The gRPC server on --grpc_host:--port (and --grpc_socket_path); (server, bound port)."""
  from serving.server import grpc_service

  address = f"{options.grpc_host}:{options.port}"
  addresses = [address] + ([f"unix:{options.grpc_socket_path}"] if options.grpc_socket_path else [])
  try:
    server, ports = grpc_service.make_server(
      core,
      addresses,
      options.grpc_max_threads,
      metrics,
      max_receive_bytes=options.grpc_max_message_bytes,
      channel_arguments=_grpc_channel_arguments(options),
    )
  except RuntimeError as error:
    raise cli.UsageError(
      f"{error}: pick another --port (0 picks a free one) or --grpc_socket_path"
    ) from None
  return server, ports[address]


def _set_xla_compilation(options):
  """As tensorflow_model_server's main.cc does before it builds the server: XLA compilation
  is off in this process unless --xla_cpu_compilation_enabled or --xla_gpu_compilation_enabled
  (TensorFlow's own switch: see serving.tf_serving.xla_compilation)."""
  from serving.tf_serving import xla_compilation

  enabled = xla_compilation.enabled_by_flags(
    options.xla_cpu_compilation_enabled, options.xla_gpu_compilation_enabled
  )
  try:
    xla_compilation.set_enabled(enabled)
  except xla_compilation.SwitchMissing as error:
    raise cli.RunError(
      f"{error}: this server cannot refuse XLA compilation as TF Serving does; start it with "
      "--xla_cpu_compilation_enabled=true to serve without that check"
    ) from None


XLA_HINT = (
  " (a function marked jit_compile=True must compile with XLA: start with "
  "--xla_cpu_compilation_enabled=true, or --xla_gpu_compilation_enabled=true on a GPU; or "
  "export with --decode=graph)"
)


# TF Serving's main.cc prints "Failed to start server" and returns -1: exit status 255.
FAILED_START_STATUS = 255


def _check_initial_loads(core):
  """TF Serving's start fails, naming each model whose newest version did not load (exit
  status 255, as tensorflow_model_server's)."""
  from serving.server.errors import StatusError

  try:
    core.check_initial_loads()
  except StatusError as error:
    core.stop()
    hint = XLA_HINT if "XLA compilation disabled" in error.message else ""
    raise cli.RunError(
      f"Failed to start server. Error: {error.code}: {error.message}{hint}", FAILED_START_STATUS
    ) from None


def main(argv):
  # Every check that needs no model comes first, those that need no TensorFlow before it loads:
  # flags and config files, the ports, the base paths; then the labels.
  del argv  # cli.run refuses positional arguments
  options = server_flags.read()  # the typed flags, read once
  configs = _model_configs(options, server_flags.given())
  params = _batching_parameters(options)
  metrics_path = _metrics_path(options)
  _grpc_channel_arguments(options)
  sock = _check_ports(options)
  cli.start_tensorflow_quietly()
  logging.set_verbosity(logging.INFO)
  from serving.server import model_config
  from serving.server.batching import Batcher
  from serving.server.monitoring import Metrics
  from serving.server.server_core import ServerCore

  _set_xla_compilation(options)
  metrics = Metrics()
  batcher = Batcher(params) if options.enable_batching else None
  core = ServerCore.from_configs(
    configs,
    options.file_system_poll_wait_seconds,
    allow_version_labels_for_unavailable_models=(
      options.allow_version_labels_for_unavailable_models
    ),
    batcher=batcher,
    metrics=metrics,
  )
  try:
    core.check_labels_on_disk()
  except model_config.ConfigError as error:
    raise cli.UsageError(str(error)) from None
  logging.info("configuration: %s", server_flags.describe(options))
  core.start()
  _check_initial_loads(core)
  if options.model_config_file and options.model_config_file_poll_wait_seconds > 0:
    core.watch_config_file(
      options.model_config_file, options.model_config_file_poll_wait_seconds, configs
    )
  grpc_server, grpc_port = _start_grpc(core, metrics, options)
  timeout = options.rest_api_timeout_in_ms / 1000 if options.rest_api_timeout_in_ms > 0 else None
  server = make_server(
    core,
    max_body_bytes=options.max_body_bytes,
    threads=options.rest_api_num_threads,
    read_timeout_seconds=options.rest_api_read_timeout_seconds,
    sock=sock,
    timeout_seconds=timeout,
    metrics=metrics,
    metrics_path=metrics_path,
    cors=options.rest_api_enable_cors_support,
  )
  port = server.server_address[1]
  _stop_on_signals(server, options.shutdown_grace_seconds)
  logging.info(
    "serving %s: REST at %s, gRPC at %s:%d%s",
    ", ".join(core.model_names()),
    " ".join(
      f"http://{_url_host(options.rest_api_host)}:{port}/v1/models/{name}"
      for name in core.model_names()
    ),
    options.grpc_host,
    grpc_port,
    f", metrics at {metrics_path}" if metrics_path else "",
  )
  if options.port_file:
    _write_port_file(options.port_file, {"rest_api_port": port, "port": grpc_port})
  try:
    server.serve_forever()
  finally:
    grpc_server.stop(options.shutdown_grace_seconds).wait()
    core.stop()
    if batcher is not None:
      batcher.close()
  return 0


if __name__ == "__main__":
  server_flags.define()
  cli.run(main)
