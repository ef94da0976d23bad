"""benchmarks/rest_latency.py and benchmarks/dropout_cost.py at tiny sizes: every mode runs
and prints what it promises (no timed assertions)."""

import json
import re
import subprocess
import threading

import pytest
import rest_latency

from serving.server import grpc_service
from serving.server.batching import Batcher, BatchingParameters
from serving.server.model_manager import ModelManager
from serving.server.rest_api import make_server
from serving.server.server_core import ServerCore

import warm_start
from train_helpers import REPO, environment

pytestmark = pytest.mark.slow  # runs the benchmark programs


def test_dropout_cost_times_every_variant_with_and_without_xla():
  result = subprocess.run(
    [
      *warm_start.python(),
      "benchmarks/dropout_cost.py",
      *("--rows=8", "--width=8", "--rounds=1", "--repeats=1"),
    ],
    cwd=REPO,
    env=environment(),
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert result.returncode == 0, result.stderr[-3000:]
  rows = re.findall(r"^XLA (on |off)  (.+?) +[0-9.]+ ms +[0-9.]+x the first$", result.stdout, re.M)
  # ThreeFry has TensorFlow kernels under XLA only: 4 variants with XLA, 3 without.
  expected = [("off", name) for name in _dropout_variants(skip="threefry")]
  expected += [("on ", name) for name in _dropout_variants()]
  assert rows == expected, result.stdout


def _dropout_variants(skip=None):
  import dropout_cost

  return [name for name in dropout_cost.VARIANTS if not skip or skip not in name]


@pytest.fixture(scope="module")
def echo_servers(tmp_path_factory):
  """{batching on/off: (rest port, grpc port)} of in-process servers of the echo model."""
  base = rest_latency.make_echo_model(str(tmp_path_factory.mktemp("echo")))
  servers, stops = {}, []
  for batching in (False, True):
    batcher = (
      Batcher(BatchingParameters(max_batch_size=64, batch_timeout_micros=2000))
      if batching
      else None
    )
    core = ServerCore([ModelManager("echo", base)], batcher=batcher)
    core.start()
    rest = make_server(core, "127.0.0.1", 0)
    threading.Thread(target=rest.serve_forever, daemon=True).start()
    grpc_server, ports = grpc_service.make_server(core, ["127.0.0.1:0"], 4)
    servers[batching] = (rest.server_address[1], ports["127.0.0.1:0"])
    stops.append((rest, grpc_server, core, batcher))
  yield servers
  for rest, grpc_server, core, batcher in stops:
    rest.shutdown(0)
    grpc_server.stop(0).wait()
    core.stop()
    if batcher:
      batcher.close()


def test_rest_latency_loads_both_protocols_with_and_without_batching(echo_servers, capsys):
  """The load generator the benchmark runs in its second process, at every (protocol,
  batching, batch) of its table, then the protocol comparison it prints."""
  results = {}
  for protocol in ("rest", "grpc"):
    name = "echo" if protocol == "rest" else "echo/grpc"
    for batching, (rest_port, grpc_port) in echo_servers.items():
      port = grpc_port if protocol == "grpc" else rest_port
      for batch in (1, 32):
        row = rest_latency.load(protocol, port, "echo", batch, 2, 0.2, rest_latency.TEXTS)
        assert row["requests"] > 0 and row["errors"] == 0, (protocol, batching, batch, row)
        assert row["rows_per_s"] == pytest.approx(row["requests_per_s"] * batch)
        results.setdefault(name, {})[batching, batch] = row
  rest_latency.compare_protocols(results)
  printed = capsys.readouterr().out
  assert printed.count("gRPC vs REST") == 4, printed


def test_rest_latency_load_process_prints_one_json_line(echo_servers):
  """`--load=PROTOCOL,PORT,BATCH`: what the benchmark starts as its load process."""
  rest_port, _ = echo_servers[False]
  result = subprocess.run(
    [
      *warm_start.python(),
      "benchmarks/rest_latency.py",
      f"--load=rest,{rest_port},3",
      *("--model=echo", "--seconds=0.2", "--concurrency=2"),
    ],
    cwd=REPO,
    env=environment(),
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert result.returncode == 0, result.stderr[-3000:]
  row = json.loads(result.stdout.strip().splitlines()[-1])
  assert row["requests"] > 0 and row["errors"] == 0, row
