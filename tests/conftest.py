"""Shared fixtures: quiet TensorFlow, small models, a run directory and its export. The project
is installed (`pip install -e .`, and pyproject.toml's pytest `pythonpath`): no sys.path edits."""

import cli

import os

# One thread per op in each test process and in the programs the tests start (they inherit
# it): `make test` already runs two test processes on two cores, and TensorFlow's per-op thread
# pools would otherwise oversubscribe them (measured: less CPU time per test at one thread).
os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")
# XLA's CPU backend compiles the tests' tiny programs without LLVM's optimizations (and so do the
# programs the tests start, which inherit it): the HLO is the same and answers within the tests'
# float tolerances, and compiling is most of an XLA test's cost (test_train_step.py's XLA tests:
# 98 -> 74 CPU s).
os.environ.setdefault("XLA_FLAGS", "--xla_backend_optimization_level=0")
cli.start_tensorflow_quietly()  # each test process (xdist worker) starts TensorFlow quietly

import gc  # noqa: E402

import file_durations  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402
from built_once import built_once  # noqa: E402

import tfattn  # noqa: E402

# What the imports left (TensorFlow, Keras, the model library) lives as long as the test process:
# out of the collector's sight, the process's collections skip it.
gc.freeze()

# On Ampere and later GPUs TensorFlow runs float32 matmuls in TF32 (10-bit mantissa, ~1e-3
# relative error); tests compare float32 computations with float32 or float64 references at
# float32 tolerances, so they run in true float32 everywhere. (CLI tests run in subprocesses
# on the CPU: see train_helpers.environment.)
tf.config.experimental.enable_tensor_float_32_execution(False)


# The test files that keep one process busy longest are handed out first, so the short files
# fill the gaps at the end and the two workers finish together (`make test` passes
# --no-loadscope-reorder, or xdist would order files by their number of tests). The CPU seconds
# come from tests/durations.json, which `make test-durations` measures and rewrites
# (tests/file_durations.py). xdist hands a worker its next file while it still runs the last
# two tests of the one before, so every file over LONG_FILE_SECONDS goes first; a file not in
# the record only runs later. The order changes no result.
LONG_FILE_SECONDS = 9.0


# The tests marked slow here, not in their file: they run no program, training or XLA compile,
# but took half a CPU second or more in the last recording (tests/durations.json's slow_unit_tests,
# which `make test-durations` rewrites), so `make test-fast` leaves them to `make test`.
_measured_slow = set()


@pytest.hookimpl(tryfirst=True)  # before -m "not slow" deselects
def pytest_collection_modifyitems(config, items):
  tests = os.path.dirname(os.path.abspath(__file__))
  seconds = file_durations.load()
  long_files = [name for name, s in seconds.items() if s >= LONG_FILE_SECONDS]
  rank = {os.path.join(tests, name): i for i, name in enumerate(long_files)}
  items.sort(key=lambda item: rank.get(str(item.path), len(rank)))  # stable: files stay whole
  slow_unit_tests = file_durations.load_slow_unit_tests()
  for item in items:
    if item.nodeid in slow_unit_tests and item.get_closest_marker("slow") is None:
      item.add_marker(pytest.mark.slow)
      _measured_slow.add(item.nodeid)


_cpu_by_file = {}
_slow_unit_tests = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
  """While recording (make test-durations): each test's CPU seconds, added to its file's."""
  if not os.environ.get(file_durations.OUT_VARIABLE):
    yield
    return
  start = file_durations.cpu_seconds()
  yield
  seconds = file_durations.cpu_seconds() - start
  name = os.path.relpath(str(item.path), os.path.dirname(os.path.abspath(__file__)))
  _cpu_by_file[name] = _cpu_by_file.get(name, 0.0) + seconds
  unit_test = item.nodeid in _measured_slow or item.get_closest_marker("slow") is None
  if unit_test and seconds >= file_durations.FAST_TEST_LIMIT:
    _slow_unit_tests[item.nodeid] = seconds


def pytest_sessionfinish(session):
  out = os.environ.get(file_durations.OUT_VARIABLE)
  if out and _cpu_by_file:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    file_durations.write_part(out, worker, _cpu_by_file, _slow_unit_tests)


@pytest.fixture
def temp_folder_left_empty(tmp_path, monkeypatch):
  """A fresh folder as `tempfile`'s, which the test must leave empty: what a program writes to
  a temporary folder (a benchmark's exports, a profile) it removes itself. Yields the folder
  (a test of a subprocess passes it as TMPDIR)."""
  import tempfile

  folder = tmp_path / "tempfile"
  folder.mkdir()
  monkeypatch.setattr(tempfile, "tempdir", str(folder))
  yield folder
  # AutoGraph writes each function it converts there and keeps it (TensorFlow's, not ours).
  left = sorted(p.name for p in folder.iterdir() if not p.name.startswith("__autograph_generated"))
  assert not left, f"left in the temporary folder: {left}"


@pytest.fixture
def tiny_config():
  return tfattn.TransformerConfig.preset(
    "tiny", source_vocab_size=40, target_vocab_size=40, max_length=64
  )


@pytest.fixture
def tiny_model(tiny_config):
  return tfattn.Transformer(tiny_config)


def random_ids(batch, length, vocab, seed, low=3):
  """Ids in [low, vocab): no padding, BOS or EOS."""
  return tf.random.stateless_uniform([batch, length], [seed, 1], low, vocab, tf.int32)


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory):
  """A run directory as `python -m train` leaves it (vocab, configs, a checkpoint) for a tiny,
  untrained numbers model: enough to export and serve quickly."""
  return built_once(tmp_path_factory, "trained_run", lambda: _make_trained_run(tmp_path_factory))


def _make_trained_run(tmp_path_factory):
  import json

  from tfattn import text
  from tfattn.support.run_dir import RunDir
  from train import tasks, tokenizer

  run_dir = tmp_path_factory.mktemp("run")
  layout = RunDir(run_dir)
  task = tasks.builtin_task("numbers", num_train=400, num_eval=20)
  source, target = (
    text.load_tokenizer(
      tokenizer.learn_and_write(
        tokenizer.SENTENCEPIECE,
        task.train().map(lambda *pair, i=index: pair[i]),
        200,
        os.path.join(layout.vocab, side),
      )
    )
    for side, index in (("source", 0), ("target", 1))
  )
  config = tfattn.TransformerConfig.preset(
    "tiny",
    source_vocab_size=source.vocab_size,
    target_vocab_size=target.vocab_size,
    d_model=32,
    dff=64,
    num_encoder_layers=1,
    num_decoder_layers=1,
    max_length=24,
  )
  with open(layout.model_config, "w") as f:
    f.write(config.to_json())
  with open(layout.task, "w") as f:
    json.dump({"name": "numbers", "kind": tasks.SEQ2SEQ, "num_classes": 2}, f)
  model = tfattn.Transformer(config)
  tf.train.Checkpoint(model=model).save(os.path.join(layout.checkpoints, "ckpt"))
  return run_dir


@pytest.fixture(scope="session")
def exported(trained_run, tmp_path_factory):
  """`<base>/1` exported from `trained_run` with greedy decoding (fast)."""
  from serving import export
  from tfattn.decode_options import DecodeOptions

  def build():
    base = tmp_path_factory.mktemp("models")
    return base, export.export(
      str(trained_run), str(base), options=DecodeOptions(strategy="greedy")
    )

  return built_once(tmp_path_factory, "exported", build)


@pytest.fixture(scope="session")
def xla_exported(trained_run, tmp_path_factory):
  """`<base>/1` exported from `trained_run` with greedy decoding in XLA mode (compiled, its
  warm-up records cover every length bucket): built once per session and shared by the
  export, server and XLA-flag tests, which only read it (a test that changes it copies it)."""
  from serving import export
  from tfattn.decode_options import DecodeOptions

  def build():
    base = tmp_path_factory.mktemp("xla_models")
    greedy = DecodeOptions(strategy="greedy")
    return base, export.export(str(trained_run), str(base), options=greedy, decode="xla")

  return built_once(tmp_path_factory, "xla_exported", build)
