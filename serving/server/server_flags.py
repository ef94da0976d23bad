"""`python -m serving.server`'s command line, declared once: each flag's type, default, help and
bounds are one entry of DECLARED; define() makes the absl flags from it, and everything that
lists the flags (the configuration logged at start, the tests of --help) reads NAMES.

The names and defaults mirror tensorflow_model_server's (model_servers/main.cc) where it has
the flag; --max_body_bytes, --port_file and --shutdown_grace_seconds are this server's own.
"""

import dataclasses
import os
import sys
from typing import Any, Mapping

from absl import flags


@dataclasses.dataclass(frozen=True)
class Flag:
  """One flag: absl's DEFINE_<kind>(name, default, help, **bounds)."""

  kind: str  # "string", "integer", "float", "bool", "enum" (bounds: enum_values), "list"
  name: str
  default: Any
  help: str
  bounds: Mapping[str, Any] = dataclasses.field(default_factory=dict)


def _flag(kind, name, default, help, **bounds):
  return Flag(kind, name, default, help, bounds)


DECLARED = (
  _flag(
    "string",
    "model_name",
    "default",
    "Name the model is served under (ignored with --model_config_file).",
  ),
  _flag(
    "string",
    "model_base_path",
    None,
    "Directory holding numeric version folders (<path>/<N>/saved_model.pb). "
    "Required unless --model_config_file is given.",
  ),
  _flag(
    "string",
    "model_config_file",
    None,
    "A text ModelServerConfig (model_config_list { config { name base_path "
    "model_platform model_version_policy version_labels } }): serve these "
    "models instead of --model_name/--model_base_path.",
  ),
  _flag(
    "float",
    "model_config_file_poll_wait_seconds",
    0,
    "Seconds between re-reads of --model_config_file (0: read once at start).",
    lower_bound=0,
  ),
  _flag(
    "integer", "port", 8500, "gRPC port (0 picks a free one).", lower_bound=0, upper_bound=65535
  ),
  _flag(
    "string",
    "grpc_host",
    "127.0.0.1",
    "Address the gRPC port binds: 0.0.0.0 serves every interface.",
  ),
  _flag("string", "grpc_socket_path", None, "Also serve gRPC on this UNIX socket."),
  _flag(
    "integer",
    "grpc_max_threads",
    4 * (os.cpu_count() or 1),
    "gRPC calls processed at once (TF Serving's default: 4 x CPUs).",
    lower_bound=1,
  ),
  _flag(
    "integer",
    "grpc_max_message_bytes",
    64 * 1024 * 1024,
    "Largest gRPC request message in bytes (larger: RESOURCE_EXHAUSTED).",
    lower_bound=1,
    upper_bound=2**31 - 1,
  ),
  _flag(
    "string",
    "grpc_channel_arguments",
    "",
    "gRPC server options, e.g. grpc.max_concurrent_streams=100 (comma-separated key=value).",
  ),
  _flag(
    "integer",
    "rest_api_port",
    8501,
    "REST port (0 picks a free one).",
    lower_bound=0,
    upper_bound=65535,
  ),
  _flag(
    "string",
    "rest_api_host",
    "127.0.0.1",
    "Address to bind: 127.0.0.1 serves this machine only, 0.0.0.0 every interface.",
  ),
  _flag(
    "integer",
    "rest_api_num_threads",
    4 * (os.cpu_count() or 1),
    "Requests processed at once (TF Serving's default: 4 x CPUs).",
    lower_bound=1,
  ),
  _flag(
    "integer",
    "rest_api_read_timeout_seconds",
    30,
    "A request must arrive whole within this many seconds of its first byte, however "
    "slowly it trickles; an idle keep-alive connection is closed after this many.",
    lower_bound=1,
  ),
  _flag(
    "integer",
    "rest_api_timeout_in_ms",
    30000,
    "Stop a REST request's model run after this long: 504 (0: no limit).",
  ),
  _flag(
    "bool",
    "rest_api_enable_cors_support",
    False,
    "Add Access-Control-Allow-* headers to every REST answer.",
  ),
  _flag(
    "string",
    "monitoring_config_file",
    None,
    "A text MonitoringConfig: prometheus_config { enable: true path: ... } "
    "serves Prometheus metrics on the REST port (default path "
    "/monitoring/prometheus/metrics).",
  ),
  _flag(
    "float",
    "file_system_poll_wait_seconds",
    1.0,
    "Seconds between looks for new versions of each model (0: look once).",
    lower_bound=0,
  ),
  _flag(
    "enum",
    "model_version_policy",
    "latest",
    "Which versions to serve: the newest, all, or --versions.",
    enum_values=["latest", "all", "specific"],
  ),
  _flag("list", "versions", [], "Versions served with --model_version_policy=specific, e.g. 1,2."),
  _flag(
    "string",
    "version_labels",
    "",
    "Labels for /labels/L URLs, e.g. stable=1,canary=2; each must name a "
    "served version (see --allow_version_labels_for_unavailable_models).",
  ),
  _flag(
    "bool",
    "allow_version_labels_for_unavailable_models",
    False,
    "Accept labels naming versions that are not served (TF Serving's flag); "
    "requests for such a label answer 404 until the version is served.",
  ),
  _flag(
    "bool",
    "xla_cpu_compilation_enabled",
    False,
    "Let functions marked jit_compile=True compile with XLA (TF Serving's flag, default "
    "off): without this flag or --xla_gpu_compilation_enabled, every XLA compilation fails "
    "with INTERNAL 'XLA compilation disabled', so a version whose warm-up compiles does not "
    "load and other requests that compile answer that error.",
  ),
  _flag(
    "bool",
    "xla_gpu_compilation_enabled",
    False,
    "Enable both XLA:CPU and XLA:GPU JIT (TF Serving >= 2.18's flag, default off); here, "
    "as in TF Serving, either XLA flag lets every device compile.",
  ),
  _flag("bool", "enable_batching", False, "Merge concurrent requests into batches."),
  _flag(
    "string",
    "batching_parameters_file",
    None,
    "TF Serving batching parameters (text proto), used with --enable_batching.",
  ),
  _flag(
    "integer",
    "max_body_bytes",
    64 * 1024 * 1024,
    "Largest accepted REST request body in bytes (larger: 413).",
    lower_bound=1,
  ),
  _flag(
    "string",
    "port_file",
    None,
    'Once serving, write the bound ports here as JSON: {"rest_api_port": N, "port": M}.',
  ),
  _flag(
    "float",
    "shutdown_grace_seconds",
    10.0,
    "On SIGTERM/SIGINT, stop accepting and let requests in flight finish for up to this long.",
    lower_bound=0,
  ),
)
NAMES = tuple(flag.name for flag in DECLARED)


def define(flag_values=flags.FLAGS):
  """Defines every declared flag (only `python -m serving.server` does: importing the server's
  modules defines none, so importers may use the same names), as flags of the program that runs
  (so --help lists them)."""
  for flag in DECLARED:
    getattr(flags, f"DEFINE_{flag.kind}")(
      name=flag.name, default=flag.default, help=flag.help, flag_values=flag_values, **flag.bounds
    )
    flag_values.register_key_flag_for_module(sys.argv[0], flag_values[flag.name])
