"""benchmarks/decode_speed.py --run_dir: the graph and XLA exports of a tiny run, loaded as the
server loads them, timed side by side (the path that once failed on every device)."""

import types

import decode_speed
import pytest

pytestmark = pytest.mark.slow  # two exports (one compiled with XLA per length bucket)


def test_export_comparison_times_both_exports_of_a_run(trained_run, capsys):
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
