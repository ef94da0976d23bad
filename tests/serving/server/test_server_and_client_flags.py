"""The documented flags of `python -m serving.server` and `python -m serving.tools.client` through
their real command lines: one server start with many flags, each flag's effect seen from
outside (the in-process keyword arguments are tested elsewhere; this is the flag wiring)."""

import json
import shutil
import subprocess

import grpc
import numpy as np
import pytest
from tensorflow_serving.apis import get_model_status_pb2, model_service_pb2_grpc
from test_server_conformance import _half_plus_two

from serving.server.launch import start_subprocess
from serving.tools.client import GrpcServingClient, ServingClient, ServingError

import warm_start
from train_helpers import REPO, environment, poll_until

pytestmark = pytest.mark.slow  # runs the server and the client as programs

NAME = "half_plus_two"
# Linux routes all of 127.0.0.0/8 to the loopback device: a server bound to 127.0.0.2 is not
# reachable at 127.0.0.1, which shows the host flags are obeyed.
REST_HOST, GRPC_HOST = "127.0.0.2", "127.0.0.3"
LIMIT = 4096  # bytes: --max_body_bytes and --grpc_max_message_bytes


@pytest.fixture(scope="module")
def server(tmp_path_factory):
  tmp = tmp_path_factory.mktemp("flags")
  base = _half_plus_two(tmp / "base")
  shutil.copytree(base / "123", base / "124")
  socket_path = tmp / "grpc.sock"
  flags = [
    f"--rest_api_host={REST_HOST}",
    f"--grpc_host={GRPC_HOST}",
    f"--grpc_socket_path={socket_path}",
    "--grpc_max_threads=3",
    "--rest_api_num_threads=3",
    f"--grpc_max_message_bytes={LIMIT}",
    f"--max_body_bytes={LIMIT}",
    "--file_system_poll_wait_seconds=0.5",
    "--model_version_policy=all",
    "--version_labels=stable=123,canary=124",
  ]
  process, ports = start_subprocess(
    NAME, str(base), extra_flags=flags, python=warm_start.python(), env=warm_start.environment()
  )
  try:
    yield base, socket_path, ports, process
  finally:
    process.terminate()
    process.wait(timeout=60)


def test_hosts_socket_and_size_limits(server):
  base, socket_path, ports, process = server
  rest = ServingClient(NAME, host=REST_HOST, port=ports.rest, timeout=30)
  assert rest.predict(instances=[1.0])["predictions"] == [2.5]
  with pytest.raises(OSError):  # nothing listens on 127.0.0.1
    ServingClient(NAME, host="127.0.0.1", port=ports.rest, timeout=30).status()
  with pytest.raises(ServingError) as error:  # a body over --max_body_bytes
    rest.predict(instances=[1.0] * LIMIT)
  assert error.value.status == 413

  remote = GrpcServingClient(NAME, host=GRPC_HOST, port=ports.grpc, timeout=30)
  try:
    assert remote.predict({"x": [3.0]})["y"].tolist() == [3.5]
    with pytest.raises(grpc.RpcError) as error:  # a message over --grpc_max_message_bytes
      remote.predict({"x": np.ones(LIMIT, np.float32)})
    assert error.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
  finally:
    remote.close()
  with grpc.insecure_channel(f"unix:{socket_path}") as channel:  # --grpc_socket_path
    request = get_model_status_pb2.GetModelStatusRequest()
    request.model_spec.name = NAME
    status = model_service_pb2_grpc.ModelServiceStub(channel).GetModelStatus(request, timeout=30)
    assert {v.version for v in status.model_version_status} >= {123, 124}
  # The threads' flags reach the server's configuration (their effect is load-dependent).
  assert "--grpc_max_threads=3" in process.log_tail()
  assert "--rest_api_num_threads=3" in process.log_tail()

  # --file_system_poll_wait_seconds=0.5: a new version is found by the polls that follow.
  shutil.copytree(base / "123", base / ".new")
  (base / ".new").rename(base / "125")
  poll_until(
    lambda: any(
      s["version"] == "125" and s["state"] == "AVAILABLE"
      for s in rest.status()["model_version_status"]
    ),
    "version 125 available",
  )


def test_client_host_and_version_label_flags(server):
  _, _, ports, _ = server

  def client(*flags):
    return subprocess.Popen(
      [*warm_start.python(), "-m", "serving.tools.client", f"--model={NAME}", "--metadata", *flags],
      cwd=REPO,
      env=environment(),
      stdout=subprocess.PIPE,
      stderr=subprocess.PIPE,
      text=True,
    )

  over_rest = client(f"--host={REST_HOST}", f"--port={ports.rest}", "--version_label=stable")
  over_grpc = client(
    "--protocol=grpc", f"--host={GRPC_HOST}", f"--port={ports.grpc}", "--version_label=canary"
  )
  for process, version in ((over_rest, "123"), (over_grpc, "124")):
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err[-2000:]
    assert json.loads(out)["model_spec"]["version"] == version, out[:2000]
