"""benchmarks/local_attention.py at a tiny size: every section (layer, training step,
generation) for full attention and two windows, in process, and one measurement in a worker
process as the full benchmark takes it."""

import types

import local_attention as benchmark  # benchmarks/ is on pytest's pythonpath
import pytest

pytestmark = pytest.mark.slow  # builds and traces a dozen small models


def _args(**changes):
  args = dict(
    lengths=[16, 40],
    windows=[4],
    max_full_length=40,
    train_length=24,
    generate_tokens=6,
    repeats=1,
    in_process=True,
    sections=["layer", "train", "generate"],
  )
  return types.SimpleNamespace(**{**args, **changes})


def test_every_section_measures_full_attention_and_each_window(capsys):
  results, slopes = benchmark.run_all(_args())
  for section, lengths in (("layer", [16, 40]), ("train", [24]), ("generate", [3, 6])):
    assert sorted(results[section]) == ["4", "full"]
    for mode in results[section].values():
      assert sorted(mode) == lengths
      assert all(r["seconds"] > 0 and r["peak_mb"] >= 0 for r in mode.values())
  assert ("layer", "seconds") in slopes and ("generate", "cache_mb") in slopes
  generate = results["generate"]
  assert generate["4"][3]["cache_mb"] == generate["4"][6]["cache_mb"]  # the ring: r + 1 slots
  assert generate["full"][6]["cache_mb"] > generate["full"][3]["cache_mb"]
  printed = capsys.readouterr().out
  assert "full/4" in printed and "exponent" in printed


def test_a_worker_process_reports_one_measurement():
  found = benchmark._in_worker(_args(in_process=False), "layer", "4", 16)
  assert found is not None and found["seconds"] > 0 and found["peak_mb"] >= 0


def test_the_growth_exponent_is_the_log_log_slope():
  assert benchmark.exponent([10, 100], [3, 300]) == pytest.approx(2.0)
  assert benchmark.exponent([10, 20, 40], [1, 2, 4]) == pytest.approx(1.0)
