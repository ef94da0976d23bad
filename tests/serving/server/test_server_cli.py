"""`python -m serving.server` and `serving.tools.demo` as a user types them (issue 11): --help lists
every flag; each mistake is one line on stderr, exit status 2, no traceback, nothing written.
Runs the programs as subprocesses with a private TMPDIR, so leftovers can be seen."""

import os
import socket
import subprocess
import sys
import time

import pytest

from serving.server import server_flags

from train_helpers import REPO, snapshot

pytestmark = pytest.mark.slow  # every case runs a program in a subprocess


def _run(module, args, tmp_dir, timeout=120):
  # TensorFlow's C++ logging fully on: only our own lines are judged.
  env = dict(os.environ, TMPDIR=str(tmp_dir), TF_CPP_MIN_LOG_LEVEL="0")
  return subprocess.run(
    [sys.executable, "-m", module, *args],
    cwd=REPO,
    env=env,
    capture_output=True,
    text=True,
    timeout=timeout,
  )


@pytest.fixture
def busy_port():
  with socket.socket() as sock:
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    yield sock.getsockname()[1]


# (id, module, arguments (BASE: the exported model base, EMPTY: an empty folder, PORT: a busy
# port), expected message substring).
MISTAKES = [
  ("no base path", "serving.server", [], "--model_base_path is required"),
  (
    "missing base path",
    "serving.server",
    ["--model_base_path=/nonexistent/models"],
    "--model_base_path /nonexistent/models does not exist",
  ),
  ("empty base path", "serving.server", ["--model_base_path=EMPTY"], "holds no version folder"),
  (
    "busy port",
    "serving.server",
    ["--model_base_path=BASE", "--rest_api_port=PORT"],
    "cannot listen on 127.0.0.1:PORT",
  ),
  (
    "labels without specific policy",
    "serving.server",
    ["--model_base_path=BASE", "--version_labels=stable=1,canary=2"],
    "Request to assign label canary to version 2 of model default, which is not currently "
    "available for inference",
  ),
  (
    "label syntax",
    "serving.server",
    ["--model_base_path=BASE", "--version_labels=stable"],
    "--version_labels entries look like stable=3",
  ),
  (
    "specific without versions",
    "serving.server",
    ["--model_base_path=BASE", "--model_version_policy=specific"],
    "--model_version_policy=specific needs --versions",
  ),
  (
    "versions not numbers",
    "serving.server",
    ["--model_base_path=BASE", "--model_version_policy=specific", "--versions=one"],
    "--versions takes version numbers",
  ),
  (
    "port out of range",
    "serving.server",
    ["--model_base_path=BASE", "--rest_api_port=70000"],
    "--rest_api_port",
  ),
  (
    "unknown policy",
    "serving.server",
    ["--model_base_path=BASE", "--model_version_policy=newest"],
    "--model_version_policy",
  ),
  (
    "missing batching file",
    "serving.server",
    ["--model_base_path=BASE", "--enable_batching", "--batching_parameters_file=/nope.config"],
    "--batching_parameters_file",
  ),
  ("mistyped flag", "serving.server", ["--model_path=BASE"], "Unknown command line flag"),
  (
    "busy grpc port",
    "serving.server",
    ["--model_base_path=BASE", "--port=PORT", "--rest_api_port=0"],
    "cannot listen on 127.0.0.1:PORT (Address already in use): pick another --port",
  ),
  (
    "one port for both",
    "serving.server",
    ["--model_base_path=BASE", "--port=8731", "--rest_api_port=8731"],
    "--rest_api_port and --port are both 8731",
  ),
  (
    "grpc channel arguments",
    "serving.server",
    ["--model_base_path=BASE", "--grpc_channel_arguments=oops"],
    "--grpc_channel_arguments entries look like",
  ),
  (
    "missing config file",
    "serving.server",
    ["--model_config_file=/nope/models.config"],
    "--model_config_file /nope/models.config: cannot read",
  ),
  (
    "config file typo",
    "serving.server",
    ["--model_config_file=FILE:model_config_list { config { name: 'a' base_pth: '/a' } }"],
    'not a text ModelServerConfig: 1:40 : Message type "tensorflow.serving.ModelConfig" has '
    'no field named "base_pth"',
  ),
  (
    "relative base path in config",
    "serving.server",
    [
      "--model_config_file=FILE:model_config_list { config { name: 'a' base_path: 'models/a' "
      "model_platform: 'tensorflow' } }"
    ],
    "Expected model a to have an absolute path or URI; got base_path()=models/a",
  ),
  (
    "empty base path in config",
    "serving.server",
    [
      "--model_config_file=FILE:model_config_list { config { name: 'a' base_path: 'EMPTY' "
      "model_platform: 'tensorflow' } }"
    ],
    "model a: base_path EMPTY holds no version folder",
  ),
  (
    "policy flag with a config file",
    "serving.server",
    [
      "--model_config_file=FILE:model_config_list { config { name: 'a' base_path: 'BASE' "
      "model_platform: 'tensorflow' } }",
      "--version_labels=stable=1",
    ],
    "--version_labels applies to --model_base_path; with --model_config_file write it in the file",
  ),
  (
    "label in config not served",
    "serving.server",
    [
      "--model_config_file=FILE:model_config_list { config { name: 'a' base_path: 'BASE' "
      "model_platform: 'tensorflow' version_labels { key: 'canary' value: 2 } } }"
    ],
    "Request to assign label canary to version 2 of model a, which is not currently available",
  ),
  (
    "monitoring config typo",
    "serving.server",
    ["--model_base_path=BASE", "--monitoring_config_file=FILE:prometheus_config { enabled: true }"],
    'has no field named "enabled"',
  ),
  (
    "demo on a busy port",
    "serving.tools.demo",
    ["--model_base_path=BASE", "--port=PORT"],
    "port PORT is busy (something else listens there): pick another",
  ),
  (
    "make run's check before training, on a busy port",
    "serving.tools.demo",
    ["--port=PORT", "--preflight"],
    "port PORT is busy",
  ),
  (
    "demo without a model",
    "serving.tools.demo",
    ["--model_base_path=EMPTY", "--port=0"],
    "holds no version folder",
  ),
]


@pytest.mark.parametrize(
  "module,args,message", [m[1:] for m in MISTAKES], ids=[m[0] for m in MISTAKES]
)
def test_user_mistakes(exported, tmp_path, busy_port, module, args, message):
  base, _ = exported
  empty = tmp_path / "empty"
  empty.mkdir()
  temp = tmp_path / "tmp"
  temp.mkdir()

  def fill(text):
    return (
      text.replace("BASE", str(base)).replace("EMPTY", str(empty)).replace("PORT", str(busy_port))
    )

  def argument(text):  # --flag=FILE:content -> a file holding the content
    flag, _, content = fill(text).partition("=FILE:")
    if not content:
      return fill(text)
    path = tmp_path / f"{flag.strip('-')}.config"
    path.write_text(content.replace("'", '"'))
    return f"{flag}={path}"

  before = snapshot(base)
  started = time.time()
  result = _run(module, [argument(a) for a in args], temp)
  # Our own lines only, by their exact prefix: TensorFlow's C++ runtime may print lines of its
  # own (oneDNN notices on some CPUs), which are not ours to judge.
  ours = [line for line in result.stderr.splitlines() if line.startswith(f"{module}: ")]
  assert result.returncode == 2, result.stderr
  assert len(ours) == 1 and ours[0].startswith(f"{module}: error: "), result.stderr
  assert fill(message) in ours[0], result.stderr
  assert "Traceback" not in result.stderr and result.stdout == ""
  assert snapshot(base) == before and not os.listdir(empty) and not os.listdir(temp)
  if "busy port" in message or "PORT" in message:
    assert time.time() - started < 30  # found before any model loads


@pytest.mark.parametrize(
  "module,own_flags",
  [
    ("serving.server", server_flags.NAMES),
    ("serving.tools.demo", ("run_dir", "port", "text", "model_name", "model_base_path")),
  ],
)
def test_help_lists_every_flag_with_its_default(tmp_path, module, own_flags):
  result = _run(module, ["--help"], tmp_path)
  assert "Traceback" not in result.stderr
  for name in own_flags:
    assert f"--{name}:" in result.stdout or f"--[no]{name}:" in result.stdout, name
  assert "(default: '127.0.0.1')" in result.stdout or module == "serving.tools.demo"
  assert "(default: 'tfattn')" in result.stdout or module == "serving.server"


def test_demo_answers_and_leaves_nothing_behind(exported, tmp_path):
  base, _ = exported
  result = _run(
    "serving.tools.demo",
    [f"--model_base_path={base}", "--port=0", "--text=12", f"--run_dir={tmp_path / 'no_run'}"],
    tmp_path,
    timeout=300,
  )
  assert result.returncode == 0, result.stderr
  assert "response:" in result.stdout and "Traceback" not in result.stderr
  assert not [n for n in os.listdir(tmp_path) if n.startswith("tfattn-server-")]
