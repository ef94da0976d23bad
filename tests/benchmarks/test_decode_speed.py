"""benchmarks/decode_speed.py at a tiny size: the decoders and sampling variants on a random
model, and (--run_dir) the graph and XLA exports of a tiny run, loaded as the server loads
them, timed side by side (the path that once failed on every device)."""

import types

import decode_speed
import pytest

pytestmark = pytest.mark.slow  # two exports (one compiled with XLA per length bucket)


def test_export_comparison_times_both_exports_of_a_run(trained_run, capsys, temp_folder_left_empty):
  args = types.SimpleNamespace(run_dir=str(trained_run), beam=2, seconds=0.0, texts_file=None)
  results = decode_speed.compare_exports(args, batch_sizes=(1, 3))
  assert sorted(results) == [1, 3]
  for modes in results.values():
    assert sorted(modes) == ["graph", "xla"]
    for timing in modes.values():
      assert 0 < timing["p50_ms"] <= timing["p99_ms"]
      assert timing["rows_per_second"] > 0
  printed = capsys.readouterr().out
  assert "batch 1: XLA p50" in printed and "batch 3: XLA p50" in printed
  # benchmarks/gpu_pass.py's decode step reports these timings (its own test skips the step).
  import gpu_pass

  decode = {"status": "ok", "seconds": 1.0, "result": {str(b): m for b, m in results.items()}}
  steps = {name: {"status": "skipped: --skip"} for name in gpu_pass.STEPS}
  steps["decode"] = decode
  report = {"quick": True, "started": "now", "total_seconds": 1.0, "steps": steps}
  table = gpu_pass.markdown(report).split("## Export decoding (beam 4), graph vs XLA\n")[1]
  assert [line.split(" | ")[0] for line in table.splitlines()[2:4]] == ["| 1", "| 3"]


def test_every_decoder_and_sampling_variant_is_timed_on_a_tiny_model(capsys):
  """The first part of the benchmark (no --run_dir) at a tiny size: cached and uncached greedy
  at each length, beam and padded XLA greedy against greedy, and every sampling variant."""
  args = types.SimpleNamespace(batch=2, source_length=3, rounds=1)
  results = decode_speed.compare_decoders(args, preset="tiny", vocab=40, lengths=(2, 3), length=3)
  assert sorted(results["cached_vs_uncached"]) == [2, 3]
  for rates in results["cached_vs_uncached"].values():
    assert sorted(rates) == ["cached", "uncached"] and min(rates.values()) > 0
  assert sorted(results["decoders"]) == ["beam", "greedy", "xla"]
  assert min(results["decoders"].values()) > 0
  sampling = results["sampling"]
  assert {"greedy", "sample", "top-p 0.9", "XLA greedy", "XLA sample", "XLA top-p 0.9"} <= set(
    sampling
  )
  assert len(sampling) == 7 and min(sampling.values()) > 0
  printed = capsys.readouterr().out
  assert "model: tiny" in printed and "beam 4" in printed and "XLA top-p 0.9" in printed
