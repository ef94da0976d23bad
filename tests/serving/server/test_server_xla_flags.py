"""--xla_cpu_compilation_enabled / --xla_gpu_compilation_enabled: the server refuses XLA
compilation as tensorflow_model_server does (TensorFlow's own switch,
serving.tf_serving.xla_compilation)
unless a flag lifts it. With warm-up records an XLA export does not load (the server does not
start); without them it loads and every request that compiles answers INTERNAL. Graph exports
need no flag."""

import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from serving import export
from serving.server.errors import StatusError
from serving.server.launch import start_subprocess, stop
from serving.server.model_manager import ModelManager
from serving.server.server_core import ServerCore
from serving.tf_serving import warmup, xla_compilation
from serving.tools.client import ServingClient, ServingError

import warm_start

pytestmark = pytest.mark.slow  # exports XLA models and compiles them

DISABLED = "XLA compilation disabled"


@pytest.fixture(scope="module")
def xla_exports(xla_exported, tmp_path_factory):
  """(base path of an XLA export with its warm-up records (the session's), base path of a copy
  without, base path of a copy whose warm-up file holds its first record only)."""
  warm, path = xla_exported
  copies = tmp_path_factory.mktemp("xla")
  cold, first = copies / "cold", copies / "first"
  for copy in (cold, first):
    shutil.copytree(os.path.dirname(path), copy)
  os.remove(os.path.join(cold, "1", warmup.WARMUP_FILE))
  records = tf.data.TFRecordDataset(os.path.join(path, warmup.WARMUP_FILE))
  with tf.io.TFRecordWriter(os.path.join(first, "1", warmup.WARMUP_FILE)) as writer:
    writer.write(next(iter(records)).numpy())
  return str(warm), str(cold), str(first)


@pytest.fixture
def compilation(request):
  """Sets TensorFlow's process-wide switch for one test, then lets XLA compile again (other
  tests in this process compile)."""
  xla_compilation.set_enabled(request.param)
  yield request.param
  xla_compilation.set_enabled(True)


def _loaded(name, base):
  manager = ModelManager(name, base, poll_seconds=0)
  manager.start()
  return manager


def test_either_flag_leaves_compilation_on_and_neither_turns_it_off():
  assert not xla_compilation.enabled_by_flags(False, False)
  assert xla_compilation.enabled_by_flags(True, False)
  assert xla_compilation.enabled_by_flags(False, True)
  try:
    xla_compilation.set_enabled(False)
    assert not xla_compilation.is_enabled()
  finally:
    xla_compilation.set_enabled(True)
  assert xla_compilation.is_enabled()


def test_the_programs_that_start_a_server_tell_an_xla_export_apart(xla_exports, exported, tmp_path):
  """serving.tools.demo and benchmarks/rest_latency.py pass the XLA flag for these only."""
  assert export.is_xla_export(xla_exports[0]) and export.is_xla_export(xla_exports[1])
  assert not export.is_xla_export(str(exported[0]))
  assert not export.is_xla_export(str(tmp_path / "missing"))


@pytest.mark.parametrize("compilation", [False], indirect=True)
def test_without_a_flag_an_xla_export_fails_its_warm_up_as_tf_serving_does(
  xla_exports, exported, compilation
):
  warm, cold, _ = xla_exports
  manager = _loaded("m", warm)
  assert not manager.is_available()
  state, status = manager.states()[1]
  assert state == "END" and status["error_code"] == "INTERNAL"
  assert status["error_message"].startswith(DISABLED)
  with pytest.raises(StatusError) as refused:
    ServerCore([manager, _loaded("graph", str(exported[0]))]).check_initial_loads()
  assert refused.value.code == "UNKNOWN"
  assert refused.value.message == (
    "1 servable(s) did not become available: "
    f"{{{{{{name: m version: 1}} due to error: INTERNAL: {status['error_message']}}}, }}"
  )
  # Without warm-up records the version loads, and every request that compiles fails.
  manager = _loaded("m", cold)
  assert manager.is_available()
  for _ in range(2):
    with pytest.raises(StatusError) as failed:
      manager.servable().run("serving_default", {"text": np.array([b"12"])})
    assert failed.value.code == "INTERNAL" and failed.value.message.startswith(DISABLED)
  # A graph export compiles nothing: it loads and answers.
  graph = _loaded("graph", str(exported[0]))
  assert graph.servable().run("serving_default", {"text": np.array([b"12"])})["translation"].size


@pytest.mark.parametrize("compilation", [True], indirect=True)
def test_with_compilation_on_the_xla_export_compiles_and_answers(xla_exports, compilation):
  manager = _loaded("m", xla_exports[1])  # no warm-up: the request below compiles one program
  ServerCore([manager]).check_initial_loads()
  answer = manager.servable().run("serving_default", {"text": np.array([b"12"])})
  assert answer["translation"].shape == (1,)


@pytest.mark.slow  # a server subprocess
def test_the_server_without_a_flag_does_not_start_on_an_xla_export_with_warm_up(xla_exports):
  with pytest.raises(RuntimeError) as failed:
    start_subprocess("m", xla_exports[0], python=warm_start.python(), env=warm_start.environment())
  assert failed.value.returncode == 255  # tensorflow_model_server's main.cc returns -1
  assert (
    "serving.server: error: Failed to start server. Error: UNKNOWN: 1 servable(s) did not "
    f"become available: {{{{{{name: m version: 1}} due to error: INTERNAL: {DISABLED}"
  ) in str(failed.value)
  assert "--xla_cpu_compilation_enabled=true" in str(failed.value)


def _config_file(path, models):
  path.write_text(
    "model_config_list {\n"
    + "".join(
      f'  config {{ name: "{name}" base_path: "{base}" model_platform: "tensorflow" }}\n'
      for name, base in models.items()
    )
    + "}\n"
  )
  return str(path)


@pytest.mark.slow  # a server subprocess
def test_the_server_without_a_flag_answers_internal_where_an_xla_export_compiles(
  xla_exports, exported, tmp_path
):
  config = _config_file(tmp_path / "models.config", {"graph": exported[0], "xla": xla_exports[1]})
  process, ports = start_subprocess(
    extra_flags=[f"--model_config_file={config}"],
    python=warm_start.python(),
    env=warm_start.environment(),
  )
  try:
    xla = ServingClient("xla", port=ports.rest)
    xla.wait_until_available()
    with pytest.raises(ServingError) as failed:
      xla.predict(instances=["12"])
    assert failed.value.status == 500 and failed.value.message.startswith(DISABLED)
    assert ServingClient("graph", port=ports.rest).predict(instances=["12"])["predictions"]
  finally:
    assert stop(process) == 0


@pytest.mark.slow  # a server subprocess each
@pytest.mark.parametrize(
  "flag, warmed",
  [("xla_cpu_compilation_enabled", True), ("xla_gpu_compilation_enabled", False)],
  ids=["cpu-flag-warm-up", "gpu-flag-first-request"],
)
def test_either_flag_serves_the_xla_export(xla_exports, flag, warmed):
  """With the CPU flag the warm-up compiles and the version loads; with the GPU flag (a copy
  without warm-up records) the first request compiles and answers. One program each: the copy
  the CPU flag serves keeps the first warm-up record only (the replay of every bucket's record
  is the server's own code, tested in-process: test_server.py's XLA export, and above)."""
  process, ports = start_subprocess(
    "xla",
    xla_exports[2 if warmed else 1],
    extra_flags=[f"--{flag}=true"],
    python=warm_start.python(),
    env=warm_start.environment(),
  )
  try:
    rows = ServingClient("xla", port=ports.rest).predict(instances=["12"])["predictions"]
    assert rows[0]["translation"]
  finally:
    assert stop(process) == 0
