"""Shared fixtures: quiet TensorFlow, small models, a run directory and its export. The project
is installed (`pip install -e .`, and pyproject.toml's pytest `pythonpath`): no sys.path edits."""

import cli

import os

# One thread per op in each test process and in the programs the tests start (they inherit
# it): `make test` already runs two test processes on two cores, and TensorFlow's per-op thread
# pools would otherwise oversubscribe them (measured: less CPU time per test at one thread).
os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")
cli.start_tensorflow_quietly()  # each test process (xdist worker) starts TensorFlow quietly

import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

import tfattn  # noqa: E402

# On Ampere and later GPUs TensorFlow runs float32 matmuls in TF32 (10-bit mantissa, ~1e-3
# relative error); tests compare float32 computations with float32 or float64 references at
# float32 tolerances, so they run in true float32 everywhere. (CLI tests run in subprocesses
# on the CPU: see train_helpers.environment.)
tf.config.experimental.enable_tensor_float_32_execution(False)


# The test files that keep one process busy longest, longest first: CPU seconds (the worker's
# and its programs') of each file in a full `-n 2 --dist loadfile` run of 2c615d2 (2026-11-27,
# 2-core AMD EPYC shared with another job, load 3.4-7.8). They are handed out first, so the
# short files fill the gaps at the end and the two workers finish together: `make test` passes
# --no-loadscope-reorder, or xdist would order files by their number of tests instead. xdist
# hands a worker its next file while it still runs the last two tests of the one before, so a
# long file handed out last would end alone: every file over ~9 CPU s is listed. A file missing
# here only runs later; the order changes no result.
LONGEST_FILES = (
  "serving/export/test_export.py",  # 124
  "train/test_train_step.py",  # 111
  "train/test_train_distributed.py",  # 103
  "serving/server/test_server.py",  # 80 (an export fewer since)
  "benchmarks/test_quality.py",  # 75 (a training and a start fewer since)
  "benchmarks/test_train_throughput.py",  # 55 (one batch a packing pass since)
  "serving/server/test_server_lifecycle.py",  # 50
  "end_to_end/test_recipes.py",  # 50
  "tfattn/test_decoding.py",  # 45
  "serving/export/test_batch_independence.py",  # ~45 (new in issue 49: six exports, two XLA)
  "serving/server/test_server_xla_flags.py",  # 45
  "end_to_end/test_compatibility.py",  # 36
  "benchmarks/test_decode_speed.py",  # 35
  "benchmarks/test_gpu_pass.py",  # 33
  "train/test_user_mistakes.py",  # 28
  "train/test_streams.py",  # 28
  "serving/tools/test_attention_maps.py",  # 27
  "benchmarks/test_batch_predict.py",  # 26
  "serving/server/test_server_fuzz.py",  # 25
  "end_to_end/test_window_pipeline.py",  # 24
  "train/test_packing.py",  # 23
  "end_to_end/test_language_model_pipeline.py",  # 23
  "benchmarks/test_data_scale.py",  # 22
  "serving/server/test_server_config_file.py",  # 22
  "serving/tools/test_predict.py",  # 22
  "tfattn/test_transformer.py",  # 20
  "serving/tools/test_batch_model.py",  # 18
  "train/test_evaluate.py",  # 17
  "tfattn/test_window_decoding.py",  # 17
  "serving/server/test_server_cli.py",  # 17
  "benchmarks/test_local_attention.py",  # 16
  "benchmarks/test_latency_and_dropout_benchmarks.py",  # 16
  "serving/server/test_grpc_service.py",  # 14
  "end_to_end/test_character_vocabularies.py",  # 13
  "serving/server/test_server_and_client_flags.py",  # 12
  "tfattn/test_language_model.py",  # 12
  "end_to_end/test_program_style.py",  # 12
  "serving/tools/test_beam_predict.py",  # 11
  "tfattn/test_no_repeat_ngram.py",  # 9
)


def pytest_collection_modifyitems(config, items):
  tests = os.path.dirname(os.path.abspath(__file__))
  rank = {os.path.join(tests, name): i for i, name in enumerate(LONGEST_FILES)}
  missing = [name for name in rank if not os.path.exists(name)]
  if missing:  # renamed or removed: keep the list true
    raise pytest.UsageError(f"tests/conftest.py LONGEST_FILES names no file: {missing}")
  items.sort(key=lambda item: rank.get(str(item.path), len(rank)))  # stable: files stay whole


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

  base = tmp_path_factory.mktemp("models")
  path = export.export(str(trained_run), str(base), options=DecodeOptions(strategy="greedy"))
  return base, path
