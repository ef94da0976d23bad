"""benchmarks/keras_hub_speed.py at its tiny size: every mode (training, generate at two batch
sizes) runs on both models and prints its ratios (no timed assertions). keras-hub is an extra
requirement (requirements-keras-hub.txt, `make bench-keras-hub`): without it the run is skipped
with a reason naming that file, and the program says so in one line."""

import importlib.util

import keras_hub_speed
import pytest


def test_without_keras_hub_the_reason_names_the_extra_requirements(monkeypatch):
  real = importlib.util.find_spec
  monkeypatch.setattr(
    importlib.util, "find_spec", lambda name, *a: None if name == "keras_hub" else real(name, *a)
  )
  reason = keras_hub_speed.keras_hub_missing()
  assert "keras-hub is not installed" in reason
  assert "requirements-keras-hub.txt" in reason and "make bench-keras-hub" in reason


@pytest.mark.slow  # five XLA compilations and one keras-hub model
def test_every_mode_runs_on_both_models_at_the_tiny_size(capsys):
  if keras_hub_speed.keras_hub_missing():
    pytest.skip(keras_hub_speed.keras_hub_missing())
  result = keras_hub_speed.measure("tiny", generate_batches=(1, 3), rounds=1, steps=1, repeats=1)
  assert sorted(result["train"]) == [
    "keras-hub",
    "keras-hub, train_on_batch",
    "tfattn",
    "tfattn, update outside XLA",
  ]
  assert all(rate["tokens_per_second"] > 0 for rate in result["train"].values())
  assert sorted(result["generate"]) == [1, 3]
  for rows, rates in result["generate"].items():
    assert sorted(rates) == ["keras-hub", "tfattn"] and all(
      r["tokens_per_second"] > 0 and len(r["round_ratios"]) == 1 for r in rates.values()
    )
    # Both wrote every new token of every row (no early stop; the prompt kept).
    assert result["checks"][rows] == {"tfattn": True, "keras-hub": True}
  keras_hub_speed.report(result, rounds=1, steps=1, repeats=1)
  printed = capsys.readouterr().out
  assert printed.count("ours / keras-hub") == 3  # training, generate at batch 1 and at 3
  assert "generate: greedy, batch 3" in printed and "WRONG" not in printed
