"""Running `python -m train` in a subprocess (strategies and determinism are per process)."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import tensorflow as tf

from train.run_config import RunConfig

import warm_start

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# A model and task small enough that a run takes seconds.
SMALL_RUN = [
  "--task=copy",
  "--model=tiny",
  "--d_model=32",
  "--dff=64",
  "--num_heads=4",
  "--num_layers=1",
  "--vocab_examples=300",
  "--batch_size=16",
  "--max_length=16",
  "--log_every=1",
  "--eval_examples=16",
  "--test_examples=16",
  "--warmup_steps=10",
  "--decode_strategy=greedy",
  # No attention pictures (matplotlib draws them in ~1 s of a run); the runs that check them
  # ask for them.
  "--attention_images=0",
  # 2,000 copy pairs, not 50,000: generating and reading them at a start costs ~0.4 CPU s less.
  "--builtin_train_examples=2000",
]

# The same model and task as a RunConfig, for Trainers built in the test process.
SMALL_CONFIG = RunConfig.of(
  task="copy",
  builtin_train_examples=2000,  # a cheaper start and checkpoint than the 50,000 default
  model="tiny",
  d_model=32,
  dff=64,
  num_heads=4,
  num_layers=1,
  vocab_examples=300,
  vocab_size=200,
  batch_size=8,
  max_length=16,
  dropout=0.0,
  warmup_steps=10,
  strategy="one_device",
  jit_compile=False,
)


def train_command(run_dir, *flags, python=None):
  """`python -m train` on the small run; warm started (tests/warm_start.py) unless `python`
  names the interpreter command."""
  python = python or warm_start.python()
  return [*python, "-m", "train", f"--run_dir={run_dir}", *SMALL_RUN, *flags]


environment = warm_start.environment


# A cold start: the real interpreter, for runs compared with each other for equal results (a
# warm start's programs share one hash seed: see tests/warm_start.py).
COLD = (sys.executable,)


def run_train(run_dir, *flags, timeout=300, python=None, **env):
  result = subprocess.run(
    train_command(run_dir, *flags, python=python),
    cwd=REPO,
    env=environment(**env),
    capture_output=True,
    text=True,
    timeout=timeout,
  )
  assert result.returncode == 0, result.stderr[-4000:]
  return result


def start_train(run_dir, *flags, python=None, **env):
  return subprocess.Popen(
    train_command(run_dir, *flags, python=python),
    cwd=REPO,
    env=environment(**env),
    stdout=subprocess.PIPE,
    stderr=subprocess.STDOUT,
    text=True,
  )


def run_trains(*runs, timeout=300, python=None):
  """Runs `(run_dir, flags...)` trainings side by side (a run keeps about one core busy, and
  runs are separate processes, so two at a time roughly halve a test's wall time); asserts
  each succeeded and returns their outputs (stdout and stderr together)."""
  processes = [start_train(run_dir, *flags, python=python) for run_dir, *flags in runs]
  outputs = [process.communicate(timeout=timeout)[0] for process in processes]
  for process, output in zip(processes, outputs):
    assert process.returncode == 0, output[-4000:]
  return outputs


# Lines other libraries print: a C++ log line of TensorFlow, absl or gRPC
# ("I0000 00:00:1795658263.677 5480 port.cc:153] ..."), absl's notice before them, and the
# second line of TensorFlow's CPU-feature notice. Which of them appear depends on the CPU (oneDNN),
# the GPU and TF_CPP_MIN_LOG_LEVEL: tests judge our own lines only.
_OTHER_LIBRARIES = re.compile(
  r"^[IWEF]\d{4} [\d:.]+ +\d+ [\w./-]+\.(?:cc|cpp|c|h):\d+\] "
  r"|^WARNING: All log messages before absl::InitializeLog\(\) is called"
  r"|^To enable the following instructions: "
)


def own_lines(text):
  """The non-blank lines of a program's output that are ours, not another library's."""
  return [line for line in text.splitlines() if line.strip() and not _OTHER_LIBRARIES.match(line)]


def run_workers(run_dir, *flags, count=2):
  """Trains with MultiWorkerMirroredStrategy: `count` processes on loopback, one TF_CONFIG
  each; asserts each succeeded and returns their outputs (stdout and stderr together)."""
  cluster = {"worker": [f"127.0.0.1:{port}" for port in free_ports(count)]}
  processes = [
    subprocess.Popen(
      train_command(run_dir, *flags, "--strategy=multi_worker"),
      cwd=REPO,
      env=environment(
        TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})
      ),
      stdout=subprocess.PIPE,
      stderr=subprocess.STDOUT,
      text=True,
    )
    for index in range(count)
  ]
  outputs = [process.communicate(timeout=300)[0] for process in processes]
  for process, output in zip(processes, outputs):
    assert process.returncode == 0, output[-4000:]
  return outputs


def snapshot(directory):
  """{relative path: (mtime_ns, sha256)} of every file under `directory` (symlinked folders
  not followed): equal before and after means no file was added, removed or rewritten."""
  import hashlib

  found = {}
  for root, _, files in os.walk(directory):
    for name in files:
      path = os.path.join(root, name)
      with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
      found[os.path.relpath(path, directory)] = (os.stat(path).st_mtime_ns, digest)
  return found


def logged_steps(run_dir):
  path = os.path.join(run_dir, "train_log.jsonl")
  if not os.path.exists(path):
    return []
  with open(path) as f:
    return [json.loads(line) for line in f if line.strip()]


def poll_until(condition, what, timeout=60, every=0.05):
  """Calls `condition()` until it is true (returns its value) or fails after `timeout` seconds
  naming `what`: tests wait on a condition, never on a fixed sleep."""
  deadline = time.monotonic() + timeout
  while True:
    value = condition()
    if value:
      return value
    assert time.monotonic() < deadline, f"not seen within {timeout} s: {what}"
    time.sleep(every)


def server_has_read(port, client):
  """Whether the server on 127.0.0.1:`port` has read everything `client` (a connected socket)
  sent: its end of the connection has an empty receive queue (Linux's /proc/net/tcp)."""
  server_end = f":{port:04X}"
  client_end = f":{client.getsockname()[1]:04X}"
  with open("/proc/net/tcp") as f:
    for line in f.readlines()[1:]:
      fields = line.split()
      if fields[1].endswith(server_end) and fields[2].endswith(client_end):
        return int(fields[4].split(":")[1], 16) == 0
  return False


def assert_same_answers_but_a_near_tie(answers, expected, near_ties=1, atol=1e-4):
  """Answers of two compilations (graph vs XLA) of the same search: [(output, score)] each.
  Floating-point sums differ between compilations, so where two candidates nearly tie the two
  may pick differently (and the outputs diverge from there): up to `near_ties` rows may differ;
  every other row has the same output and a score within `atol`. A real difference (a wrong
  seed, a lost option) changes most rows."""
  assert len(answers) == len(expected)
  same = [i for i, (a, e) in enumerate(zip(answers, expected)) if a[0] == e[0]]
  assert len(answers) - len(same) <= near_ties, (answers, expected)
  for i in same:
    assert abs(answers[i][1] - expected[i][1]) <= atol, (i, answers[i], expected[i])


def wait_for_step(run_dir, step, process, timeout=240):
  deadline = time.time() + timeout
  while time.time() < deadline:
    if any(record["step"] >= step for record in logged_steps(run_dir)):
      return
    if process.poll() is not None:
      raise AssertionError(f"training exited early:\n{process.stdout.read()[-4000:]}")
    time.sleep(0.1)
  process.kill()
  raise AssertionError(f"step {step} not reached in {timeout}s")


def latest_variables(run_dir):
  """name -> value of every variable in the latest checkpoint (model, optimizer, RNG)."""
  reader = tf.train.load_checkpoint(os.path.join(run_dir, "checkpoints"))
  return {
    name: reader.get_tensor(name)
    for name in reader.get_variable_to_shape_map()
    if not name.startswith("data/") and name != "_CHECKPOINTABLE_OBJECT_GRAPH"
  }


def run_without_tfattn(code, *args):
  """Runs `code` in a fresh interpreter that cannot import this project (no PYTHONPATH, cwd
  "/"): what another TensorFlow program sees of an export. Returns the JSON the code printed
  after "RESULT "."""
  result = subprocess.run(
    [sys.executable, "-c", code, *args],
    capture_output=True,
    text=True,
    timeout=300,
    env=dict(os.environ, PYTHONPATH=""),
    cwd="/",
  )
  assert result.returncode == 0, result.stderr[-4000:]
  return json.loads(result.stdout.split("RESULT ", 1)[1])


def free_ports(count):
  sockets = [socket.socket() for _ in range(count)]
  for s in sockets:
    s.bind(("127.0.0.1", 0))
  ports = [s.getsockname()[1] for s in sockets]
  for s in sockets:
    s.close()
  return ports


def kill(process, sig=signal.SIGKILL):
  process.send_signal(sig)
  return process.wait(timeout=120)


def assert_same_variables(a, b, atol=0.0):
  assert set(a) == set(b)
  for name in a:
    np.testing.assert_allclose(a[name], b[name], atol=atol, err_msg=name)


def image_summaries(run_dir):
  """{tag: [steps]} of the image summaries in a run's TensorBoard event files."""
  import glob

  found = {}
  for path in glob.glob(os.path.join(str(run_dir), "logs", "events.out.tfevents.*")):
    for record in tf.data.TFRecordDataset(path):
      event = tf.compat.v1.Event.FromString(record.numpy())
      for value in event.summary.value:
        if value.metadata.plugin_data.plugin_name == "images":
          found.setdefault(value.tag, []).append(event.step)
  return found


def tiny_text_run(tmp_path, **settings):
  """A RunConfig of a tiny language model on a few made-up animal sentences (train, validation
  and test files written under tmp_path); `settings` add to or replace its fields."""
  from train.run_config import RunConfig

  animals = ["cat", "dog", "bird", "fish"]
  lines = [f"the {a} sees the {b} and the {a} runs" for a in animals for b in animals] * 4

  def write(name, part):
    path = tmp_path / name
    path.write_text("\n".join(part) + "\n", encoding="utf-8")
    return str(path)

  fields = dict(
    run_dir=str(tmp_path / "run"),
    task="text",
    train_file=write("train.txt", lines),
    validation_file=write("validation.txt", lines[:6]),
    test_file=write("test.txt", lines[6:10]),
    model="tiny",
    d_model=32,
    dff=64,
    num_heads=4,
    num_layers=1,
    vocab_size=60,
    vocab_examples=100,
    batch_size=8,
    max_length=16,
  )
  return RunConfig.of(**{**fields, **settings})


def run_recording_imports(args, timeout=60):
  """Runs `python -X importtime ARGS` -> (the CompletedProcess, the names of the modules it
  imported): a program's mistake must be told before TensorFlow loads."""
  result = subprocess.run(
    [sys.executable, "-X", "importtime", *args],
    cwd=REPO,
    env=environment(),
    capture_output=True,
    text=True,
    timeout=timeout,
  )
  imported = {
    line.rsplit("|", 1)[1].strip()
    for line in result.stderr.splitlines()
    if line.startswith("import time:")
  }
  return result, imported


def resume_and_go_on(config, steps=3):
  """Exact resume, in one process: a Trainer of `config` (a RunConfig with a fresh run_dir and
  `train_steps` = 2 x `steps`) trains `steps` steps, saves the checkpoint a stopped run leaves
  (SIGTERM, Ctrl-C), and trains on to the end uninterrupted; a second Trainer of the same
  config resumes from that checkpoint with `Trainer.run`, as `python -m train` resumes.
  Asserts both end at the same step with the same model and optimizer variables, and read the
  same next batch. Returns (uninterrupted, resumed)."""
  from train.trainer import Trainer, prepare

  assert config.loop.train_steps == 2 * steps
  straight = Trainer(*prepare(config))
  straight._train_loop(straight.iterator, tf.constant(steps))
  straight._save()
  straight._train_loop(straight.iterator, tf.constant(steps))
  resumed = Trainer(*prepare(config))
  resumed.run()
  assert resumed.step == straight.step == config.loop.train_steps
  for trainer_part in ("model", "optimizer"):
    pairs = zip(getattr(resumed, trainer_part).variables, getattr(straight, trainer_part).variables)
    for got, want in pairs:
      np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6, err_msg=got.name)
  after_resume, after_straight = next(resumed.iterator), next(straight.iterator)
  assert set(after_resume) == set(after_straight)
  for name, value in after_straight.items():
    np.testing.assert_array_equal(after_resume[name].numpy(), value.numpy(), err_msg=name)
  return straight, resumed
