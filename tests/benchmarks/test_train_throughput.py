"""benchmarks/train_throughput.py at a tiny size: every model and XLA mode on full random rows,
both dtypes, and packed against unpacked batches of a pairs file, each XLA mode."""

import cli

import pytest
import train_throughput as benchmark  # benchmarks/ is on pytest's pythonpath

pytestmark = pytest.mark.slow  # traces and compiles a dozen tiny training steps


def test_every_model_and_xla_mode_is_measured():
  result = benchmark.measure("tiny", steps=1, rounds=1, batch_size=2, length=8, peak_seconds=0.05)
  found = {(v["model"], v["xla"]) for v in result["variants"]}
  assert found == {(m, x) for m in benchmark.MODELS for x in benchmark.XLA_MODES}
  assert all(v["target_tokens_per_second"] > 0 for v in result["variants"])
  assert set(benchmark.ratios(result)) == {"XLA off", "XLA on"}


def test_bfloat16_is_measured_on_tfattn_and_the_keras_peer():
  """--dtype=bfloat16: tfattn computes in bfloat16, the peer under Keras' mixed_bfloat16 policy
  (restored after), the peak in bfloat16. XLA off only: the dtype path is the same under XLA."""
  import keras

  result = benchmark.measure(
    "tiny",
    dtype="bfloat16",
    steps=1,
    rounds=1,
    batch_size=2,
    length=8,
    models=("tfattn", "keras_mha"),
    xla_modes=("off",),
    peak_seconds=0.05,
  )
  assert result["config"]["dtype"] == "bfloat16" and result["peak_flops"] > 0
  assert {(v["model"], v["xla"]) for v in result["variants"]} == {
    ("tfattn", "off"),
    ("keras_mha", "off"),
  }
  assert all(v["target_tokens_per_second"] > 0 for v in result["variants"])
  assert keras.mixed_precision.global_policy().name == "float32"


def _pairs_file(tmp_path):
  """Pairs of many lengths (1 to 9 words a side), as a translation corpus has."""
  words = "ein mann mit einem hut sitzt auf der bank".split()
  lines = [
    f"{' '.join(words[: i % 9 + 1])}\t{' '.join(reversed(words[: (i * 7) % 9 + 1]))}"
    for i in range(120)
  ]
  path = tmp_path / "pairs.tsv"
  path.write_text("\n".join(lines) + "\n", encoding="utf-8")
  return str(path)


def test_packed_and_unpacked_batches_are_measured_at_each_xla_mode(tmp_path):
  # One batch a pass: each mode then traces (and under XLA compiles) one step, not one per
  # batch shape (two unpacked batches differ in length); the table's figures are the same kind.
  result = benchmark.measure_packing(
    _pairs_file(tmp_path), "tiny", steps=1, rounds=1, batch_size=4, length=24
  )
  variants = {(v["mode"], v["xla"]): v for v in result["variants"]}
  assert set(variants) == {(m, x) for m in benchmark.PACKING_MODES for x in benchmark.XLA_MODES}
  for xla in benchmark.XLA_MODES:
    packed, unpacked = variants["packed", xla], variants["unpacked", xla]
    assert packed["real_target_tokens_per_second"] > 0
    assert packed["real_target_tokens_per_cpu_second"] > 0
    assert unpacked["pairs_per_row"] == 1 and packed["pairs_per_row"] > 1
    assert 0 < unpacked["real_share"] <= 1 and 0 < packed["real_share"] <= 1
    assert packed["row_length"] <= variants["packed_full", xla]["row_length"] == 24
  assert set(benchmark.packing_ratios(result)) == {"XLA off", "XLA on"}
  assert set(benchmark.packing_ratios(result, "packed_full")) == {"XLA off", "XLA on"}


def test_a_bad_pairs_file_is_one_usage_error(tmp_path):
  path = tmp_path / "bad.tsv"
  path.write_text("no tab here\n", encoding="utf-8")
  with pytest.raises(cli.UsageError, match=r"bad\.tsv:1: expected source<TAB>target"):
    benchmark.read_pairs(str(path))
