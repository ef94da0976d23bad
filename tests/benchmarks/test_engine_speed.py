"""benchmarks/engine_speed.py at a tiny size: every engine's mode is timed in its own process on
the same weights and sentences (the CTranslate2 rows when requirements-ctranslate2.txt is
installed, else skipped with the reason), on the random model and on a trained run; flag
mistakes are one line."""

import os
import subprocess
import sys
import types

import engine_speed
import pytest

from train_helpers import REPO, environment

pytestmark = pytest.mark.slow  # exports and one TensorFlow process per engine

TF_MODES = ["tfattn_graph", "tfattn_xla", "tfattn_graph_bf16", "tfattn_xla_bf16"]
CT2_MODES = [f"ctranslate2_{t}" for t in ("float32", "int8", "int16")]


def _args(**changes):
  values = dict(
    run_dir=None,
    marian_dir=None,
    fixed_length=None,
    reference_python=None,
    texts_file=None,
    size="tiny",
    vocab_size=60,
    sentences=12,
    source_lengths=("2", "6"),
    output_length=5,
    batch=4,
    beam=2,
    runs=1,
    latency_sentences=2,
    latency_engines=None,
    threads=1,
    seed=0,
  )
  values.update(changes)
  return types.SimpleNamespace(**values)


def test_every_engine_decodes_the_same_number_of_tokens_on_the_random_model(tmp_path):
  engines = TF_MODES + CT2_MODES
  measured = engine_speed.measure(_args(), engines, str(tmp_path), log=lambda _: 0, isolate=False)
  results = measured["results"]
  assert list(results) == TF_MODES + CT2_MODES or set(results) == set(TF_MODES + CT2_MODES)
  try:
    import ctranslate2

    supported = ctranslate2.get_supported_compute_types("cpu")
    timed = TF_MODES + [e for e in CT2_MODES if e.split("_", 1)[1] in supported]
  except ImportError:
    timed = TF_MODES
  for engine in set(engines) - set(timed):  # skipped with the reason
    assert results[engine]["status"].startswith("skipped: "), results[engine]
  for engine in timed:
    r = results[engine]
    assert r["status"] == "ok", (engine, r)
    # END is ruled out: every engine writes output_length tokens for each of the 12 sentences.
    assert r["tokens"] == 12 * 5 and r["sentences"] == 12
    assert r["tokens_per_second"] > 0 and len(r["seconds"]) == 1
    assert 0 < r["latency_p50_ms"] <= r["latency_p90_ms"]
    assert r["peak_memory_mb"] > 0
  same = engine_speed.agreement(results)
  assert same["tfattn_graph"] == 1.0
  # Float32 engines agree on almost every sentence (near-ties may split them).
  for engine in ("tfattn_xla", "ctranslate2_float32"):
    if engine in same:
      assert same[engine] >= 0.75, (engine, same[engine])
  printed = engine_speed.table(measured, "this machine")
  assert "tfattn_graph_bf16" in printed and "beam 2, length penalty 0" in printed
  if "ctranslate2_float32" in same:
    assert "tfattn_xla / ctranslate2_float32:" in printed
  # benchmarks/gpu_pass.py's engines step reports these results (its own test skips it).
  import gpu_pass

  plan = dict(measured["plan"], sentence_count=12, runs=1)
  step = {"status": "ok", "seconds": 1.0, "result": {"plan": plan, "results": results}}
  steps = {name: {"status": "skipped: --skip"} for name in gpu_pass.STEPS}
  steps["engines"] = step
  report = {"quick": True, "started": "now", "total_seconds": 1.0, "steps": steps}
  assert "| tfattn_graph | " in gpu_pass.markdown(report)


def test_a_trained_run_is_timed_on_its_own_tokenized_sentences(trained_run, tmp_path):
  texts = tmp_path / "texts.txt"
  texts.write_text("12 34\n5 6 7\n\n890\n")
  args = _args(run_dir=str(trained_run), texts_file=str(texts), latency_sentences=0)
  engines = ["tfattn_graph", "ctranslate2_float32"]
  # Each engine in a process of its own, as the benchmark runs them.
  measured = engine_speed.measure(args, engines, str(tmp_path / "work"), log=lambda _: 0)
  graph = measured["results"]["tfattn_graph"]
  assert graph["status"] == "ok" and graph["sentences"] == 3  # the blank line is skipped
  assert "latency_p50_ms" not in graph
  ct2 = measured["results"]["ctranslate2_float32"]
  if ct2["status"] == "ok":  # our export and CTranslate2 agree on the run's translations
    assert engine_speed.agreement(measured["results"])["ctranslate2_float32"] == 1.0


def test_an_imported_marian_checkpoint_is_timed_by_every_engine_transformers_included(tmp_path):
  """The transformers row runs where an interpreter with torch and transformers is (make
  check-marian's .venv-ref), else it is skipped with the reason; every engine that runs writes
  exactly --output_length tokens and agrees with our graph export."""
  marian = os.path.join(REPO, "tests", "fixtures", "marian", "shared")
  args = _args(marian_dir=marian, fixed_length=True, latency_sentences=0)
  engines = ["tfattn_graph", "ctranslate2_float32", "transformers"]
  measured = engine_speed.measure(args, engines, str(tmp_path), log=lambda _: 0, isolate=False)
  results = measured["results"]
  assert measured["plan"]["fixed_length"] and measured["plan"]["min_decoding_length"] == 5
  for engine, r in results.items():
    if r["status"].startswith("skipped: "):
      assert engine != "tfattn_graph"
      continue
    assert r["status"] == "ok", (engine, r)
    assert r["tokens"] == 12 * 5 and r["sentences"] == 12
  same = engine_speed.agreement(results)
  assert all(share >= 0.75 for share in same.values()), same
  if engine_speed.reference_python(args) is None:
    assert "make check-marian" in results["transformers"]["status"]
  printed = engine_speed.table(measured, "this machine")
  assert "every output 5 tokens" in printed


def test_without_a_marian_checkpoint_the_transformers_row_says_why(tmp_path):
  skipped = engine_speed._transformers_unavailable(["transformers"], _args())
  assert skipped["transformers"]["status"] == (
    "skipped: transformers runs a Marian checkpoint only (--marian_dir)"
  )


@pytest.mark.parametrize(
  "flags, message",
  [
    (["--engines=tfattn_graph,nope"], "--engines: unknown ['nope']"),
    (["--source_lengths=9,3"], "--source_lengths: need 1 <= shortest <= longest"),
    (["--texts_file=x.txt"], "--texts_file needs --run_dir or --marian_dir"),
    (["--marian_dir=/nonexistent"], "--marian_dir: /nonexistent holds no config.json"),
    (["--reference_python=/nonexistent"], "--reference_python: /nonexistent does not exist"),
    (["--run_dir=/nonexistent"], "is not a training run directory"),
    (["--runs=-1"], "--runs must be >= 0, got -1"),
  ],
)
def test_a_flag_mistake_is_one_line(flags, message):
  result = subprocess.run(
    [sys.executable, "benchmarks/engine_speed.py", *flags],
    cwd=REPO,
    env=environment(),
    capture_output=True,
    text=True,
    timeout=60,
  )
  assert result.returncode == 2
  assert len(result.stderr.strip().splitlines()) == 1 and message in result.stderr
