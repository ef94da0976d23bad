"""`python -m serving.server`'s command line, declared once: each flag's type, default, help and
bounds are one field of ServerFlags (`settings.setting`); `define()` makes the absl flags from it
through `cli.define_flags`, `cli.run` checks the bounds, and everything that lists the flags
(the configuration logged at start, the tests of --help) reads NAMES.

The names and defaults mirror tensorflow_model_server's (model_servers/main.cc) where it has
the flag; --max_body_bytes, --port_file and --shutdown_grace_seconds are this server's own.
"""

import cli

import dataclasses
import os
from typing import List, Optional

from absl import flags

import settings
from settings import setting


@dataclasses.dataclass(frozen=True)
class ServerFlags:
  """The flags of `python -m serving.server`."""

  model_name: str = setting(
    "default", "Name the model is served under (ignored with --model_config_file)."
  )
  model_base_path: Optional[str] = setting(
    None,
    "Directory holding numeric version folders (<path>/<N>/saved_model.pb). "
    "Required unless --model_config_file is given.",
  )
  model_config_file: Optional[str] = setting(
    None,
    "A text ModelServerConfig (model_config_list { config { name base_path "
    "model_platform model_version_policy version_labels } }): serve these "
    "models instead of --model_name/--model_base_path.",
  )
  model_config_file_poll_wait_seconds: float = setting(
    0, "Seconds between re-reads of --model_config_file (0: read once at start).", minimum=0
  )
  port: int = setting(8500, "gRPC port (0 picks a free one).", minimum=0, maximum=65535)
  grpc_host: str = setting(
    "127.0.0.1", "Address the gRPC port binds: 0.0.0.0 serves every interface."
  )
  grpc_socket_path: Optional[str] = setting(None, "Also serve gRPC on this UNIX socket.")
  grpc_max_threads: int = setting(
    4 * (os.cpu_count() or 1),
    "gRPC calls processed at once (TF Serving's default: 4 x CPUs).",
    minimum=1,
  )
  grpc_max_message_bytes: int = setting(
    64 * 1024 * 1024,
    "Largest gRPC request message in bytes (larger: RESOURCE_EXHAUSTED).",
    minimum=1,
    maximum=2**31 - 1,
  )
  grpc_channel_arguments: str = setting(
    "", "gRPC server options, e.g. grpc.max_concurrent_streams=100 (comma-separated key=value)."
  )
  rest_api_port: int = setting(8501, "REST port (0 picks a free one).", minimum=0, maximum=65535)
  rest_api_host: str = setting(
    "127.0.0.1", "Address to bind: 127.0.0.1 serves this machine only, 0.0.0.0 every interface."
  )
  rest_api_num_threads: int = setting(
    4 * (os.cpu_count() or 1),
    "Requests processed at once (TF Serving's default: 4 x CPUs).",
    minimum=1,
  )
  rest_api_read_timeout_seconds: int = setting(
    30,
    "A request must arrive whole within this many seconds of its first byte, however "
    "slowly it trickles; an idle keep-alive connection is closed after this many.",
    minimum=1,
  )
  rest_api_timeout_in_ms: int = setting(
    30000, "Stop a REST request's model run after this long: 504 (0: no limit)."
  )
  rest_api_enable_cors_support: bool = setting(
    False, "Add Access-Control-Allow-* headers to every REST answer."
  )
  monitoring_config_file: Optional[str] = setting(
    None,
    "A text MonitoringConfig: prometheus_config { enable: true path: ... } "
    "serves Prometheus metrics on the REST port (default path "
    "/monitoring/prometheus/metrics).",
  )
  file_system_poll_wait_seconds: float = setting(
    1.0, "Seconds between looks for new versions of each model (0: look once).", minimum=0
  )
  model_version_policy: str = setting(
    "latest",
    "Which versions to serve: the newest, all, or --versions.",
    choices=("latest", "all", "specific"),
  )
  versions: List[str] = setting(
    (), "Versions served with --model_version_policy=specific, e.g. 1,2."
  )
  version_labels: str = setting(
    "",
    "Labels for /labels/L URLs, e.g. stable=1,canary=2; each must name a "
    "served version (see --allow_version_labels_for_unavailable_models).",
  )
  allow_version_labels_for_unavailable_models: bool = setting(
    False,
    "Accept labels naming versions that are not served (TF Serving's flag); "
    "requests for such a label answer 404 until the version is served.",
  )
  xla_cpu_compilation_enabled: bool = setting(
    False,
    "Let functions marked jit_compile=True compile with XLA (TF Serving's flag, default "
    "off): without this flag or --xla_gpu_compilation_enabled, every XLA compilation fails "
    "with INTERNAL 'XLA compilation disabled', so a version whose warm-up compiles does not "
    "load and other requests that compile answer that error.",
  )
  xla_gpu_compilation_enabled: bool = setting(
    False,
    "Enable both XLA:CPU and XLA:GPU JIT (TF Serving >= 2.18's flag, default off); here, "
    "as in TF Serving, either XLA flag lets every device compile.",
  )
  enable_batching: bool = setting(False, "Merge concurrent requests into batches.")
  batching_parameters_file: Optional[str] = setting(
    None, "TF Serving batching parameters (text proto), used with --enable_batching."
  )
  max_body_bytes: int = setting(
    64 * 1024 * 1024, "Largest accepted REST request body in bytes (larger: 413).", minimum=1
  )
  port_file: Optional[str] = setting(
    None, 'Once serving, write the bound ports here as JSON: {"rest_api_port": N, "port": M}.'
  )
  shutdown_grace_seconds: float = setting(
    10.0,
    "On SIGTERM/SIGINT, stop accepting and let requests in flight finish for up to this long.",
    minimum=0,
  )


NAMES = tuple(field.name for field, _ in settings.declared(ServerFlags))


def define(flag_values=flags.FLAGS):
  """Defines every declared flag (only `python -m serving.server` does: importing the server's
  modules defines none, so importers may use the same names), as flags of the program that runs
  (so --help lists them)."""
  cli.define_flags(ServerFlags, flag_values=flag_values)


def read(flag_values=flags.FLAGS) -> ServerFlags:
  """The parsed flags as a ServerFlags (the program reads them once, here)."""
  values = cli.flag_values(ServerFlags, parsed=flag_values)
  return ServerFlags(**{**values, "versions": tuple(values["versions"] or ())})


def given(flag_values=flags.FLAGS) -> frozenset:
  """The names of the flags given on the command line."""
  return frozenset(name for name in NAMES if flag_values[name].present)


def describe(options: ServerFlags) -> str:
  """`--name=value` of every flag, the configuration the server logs at start."""
  return " ".join(
    f"--{name}={list(value) if name == 'versions' else value}"
    for name, value in settings.to_flags(options).items()
  )
