"""The CTranslate2 converter (serving/export/ctranslate2_model.py, python -m
serving.export.to_ctranslate2): CTranslate2 decodes the ids our search decodes.

Without CTranslate2 (`make test`), our decoding of the models in
tests/fixtures/ctranslate2/expected.json must still give the ids CTranslate2 gave when the
fixture was made (make_fixture.py there); with it (`make check-ctranslate2`), the models are
converted and decoded live as well."""

import atexit
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import pytest
import tensorflow as tf

import tfattn
from serving.export import ctranslate2_model
from serving.export.trained_run import load_trained, run_decode_options
from tfattn import decoding, text

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures")
EXPECTED = os.path.join(FIXTURES, "ctranslate2", "expected.json")
with open(EXPECTED) as _f:
  FIXTURE = json.load(_f)
CASES = {case["name"]: case for case in FIXTURE["cases"]}

sys.path.insert(0, os.path.join(FIXTURES, "ctranslate2"))
import make_fixture  # noqa: E402


@functools.lru_cache(maxsize=None)
def _marian_run(name):
  """tests/fixtures/marian/<name> imported once per session (a temporary run directory)."""
  directory = tempfile.mkdtemp(prefix="ct2-marian-")
  atexit.register(shutil.rmtree, directory, True)  # the tests only read it
  return make_fixture.import_marian(name, directory)


@functools.lru_cache(maxsize=None)
def _model_and_options(name):
  """(model, decoding options beyond the fixture's) of the case `name`, loaded once per session
  (the tests only read them): a Marian import's run options (its never-generated ids) and the
  case's minimum length."""
  case = CASES[name]
  if "marian" in case:
    run_dir = _marian_run(case["marian"])
    banned = run_decode_options(run_dir).banned_ids
    options = dict(never_generate=",".join(map(str, banned)), min_decode_length=case["min_length"])
    return load_trained(run_dir).model, options
  if "run_dir" in case:
    return load_trained(os.path.join(FIXTURES, case["run_dir"])).model, {}
  return make_fixture.build(case["config"], case["bias"]), {}


def _our_ids(model, sources, beam, **extra):
  """Our best hypothesis a source as ids up to END (not included), length penalty 0."""
  ids = tf.ragged.constant(sources).to_tensor()
  options = dict(alpha=0.0, max_decode_length=FIXTURE["max_decode_length"], **extra)
  if beam == 1:
    found = decoding.greedy_decode(model, ids, **options).ids.numpy()
  else:
    found = decoding.beam_decode(model, ids, beam_size=beam, **options).ids.numpy()[:, 0]
  # Up to END; a row without END holds max_decode_length tokens (PAD may be one of them: a
  # random model may choose it, and so may CTranslate2).
  return [row[: row.index(text.END_ID)] if text.END_ID in row else row for row in found.tolist()]


# A minimum length in a beam search: CTranslate2 takes END out of the softmax before it (its
# scores renormalized), our search (and transformers') keeps the model's log-probabilities and
# only rules END out; beams may then rank otherwise (test_ctranslate2_minimum_length_...).
RANKED_OTHERWISE = {(name, 4) for name in CASES if "min_length" in CASES[name]}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("beam", [1, 4])
def test_our_search_gives_the_ids_ctranslate2_gave(name, beam):
  case = CASES[name]
  model, options = _model_and_options(name)
  ours = _our_ids(model, case["sources"], beam, **options)
  theirs = case[f"beam_{beam}"]["ids"]
  if (name, beam) in RANKED_OTHERWISE:
    assert sum(a == b for a, b in zip(ours, theirs)) >= len(theirs) - 2
  else:
    assert ours == theirs


def _renormalized_score(model, source, hypothesis, banned, min_length):
  """Sum of log-probs of `hypothesis` (+ END if shorter than the limit) with the `banned` ids,
  and END before `min_length`, taken out of each step's softmax: CTranslate2's score."""
  limit = FIXTURE["max_decode_length"]
  target = hypothesis + ([text.END_ID] if len(hypothesis) < limit else [])
  start = model.config.start_id
  logits = model(tf.constant([source]), tf.constant([[start, *target[:-1]]]))[0].numpy()
  total = 0.0
  for step, token in enumerate(target):
    row = logits[step].astype(np.float64)
    row[list(banned)] = -np.inf
    if step < min_length:
      row[model.config.eos_id] = -np.inf
    total += row[token] - np.logaddexp.reduce(row[np.isfinite(row)])
  return total


@pytest.mark.parametrize("name", sorted(n for n, beam in RANKED_OTHERWISE))
def test_ctranslate2_minimum_length_renormalizes_the_scores(name):
  """CTranslate2's score of each of its beam hypotheses is the model's (converted) log-prob sum
  with END taken out of the softmax before the minimum length: the whole difference."""
  case = CASES[name]
  model, options = _model_and_options(name)
  banned = [int(i) for i in options["never_generate"].split(",")]
  found = case["beam_4"]
  for source, ids, score in zip(case["sources"], found["ids"], found["scores"]):
    renormalized = _renormalized_score(model, source, ids, banned, case["min_length"])
    assert renormalized == pytest.approx(score, abs=1e-3)


def test_the_fixture_covers_every_layout_the_converter_writes():
  configs = [case["config"] for case in FIXTURE["cases"] if "config" in case]
  covered = {(key, str(c.get(key))) for c in configs for key in c}
  for key, value in [
    ("norm_position", "pre"),
    ("tie_output_embedding", "False"),
    ("share_embeddings", "True"),
    ("position_encoding", "learned"),
    ("embedding_init", "gpt2"),
    ("activation", "gelu"),
    ("activation", "gelu_tanh"),
  ]:
    assert (key, value) in covered


def test_the_fixture_covers_what_a_marian_import_brings():
  configs = [
    load_trained(_marian_run(case["marian"])).model.config
    for case in FIXTURE["cases"]
    if "marian" in case
  ]
  assert {c.activation for c in configs} == {"swish"}
  assert {c.sinusoid_layout for c in configs} == {"halves"}
  assert any(c.output_bias for c in configs)  # Marian's final_logits_bias on a tied output
  assert {c.tie_output_embedding for c in configs} == {True, False}
  assert {c.share_embeddings for c in configs} == {True, False}


def test_a_model_ctranslate2_cannot_express_is_refused_in_one_line():
  config = tfattn.TransformerConfig.preset("tiny", attention_window=4)
  with pytest.raises(ValueError, match="attention_window is set"):
    ctranslate2_model.check_convertible(config)


def test_the_command_refuses_mistakes_before_loading_anything(tmp_path):
  def command(*flags):
    return subprocess.run(
      [sys.executable, "-m", "serving.export.to_ctranslate2", *flags],
      capture_output=True,
      text=True,
      timeout=60,
    )

  run_dir = os.path.join(FIXTURES, "fda25e5", "run_seq2seq")
  classifier_run = tmp_path / "classifier"
  classifier_run.mkdir()
  (classifier_run / "task.json").write_text(json.dumps({"kind": "classification"}))
  (classifier_run / "model_config.json").write_text(tfattn.TransformerConfig().to_json())
  for flags, message in [
    ((f"--run_dir={run_dir}",), "give --run_dir (the trained run) and --output_dir"),
    ((f"--run_dir={tmp_path}", f"--output_dir={tmp_path}/m"), "is not a training run directory"),
    ((f"--run_dir={run_dir}", f"--output_dir={tmp_path}"), "exists: give a new directory"),
    ((f"--run_dir={classifier_run}", f"--output_dir={tmp_path}/c"), "only seq2seq runs convert"),
  ]:
    result = command(*flags)
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and message in result.stderr


# --- Live: with CTranslate2 installed (requirements-ctranslate2.txt) ---------------------------
def _ctranslate2():
  return pytest.importorskip("ctranslate2", reason="requirements-ctranslate2.txt not installed")


def test_live_the_fixture_is_what_ctranslate2_decodes_today(tmp_path):
  ctranslate2 = _ctranslate2()
  with tempfile_fixture(tmp_path) as written:
    assert written["ctranslate2"] == ctranslate2.__version__
    for case in written["cases"]:
      for beam in (1, 4):
        assert case[f"beam_{beam}"]["ids"] == CASES[case["name"]][f"beam_{beam}"]["ids"]


class tempfile_fixture:
  """make_fixture.main() writing into tmp_path instead of the committed file."""

  def __init__(self, tmp_path):
    self.path = tmp_path

  def __enter__(self):
    here = make_fixture.HERE
    make_fixture.HERE = str(self.path)
    try:
      make_fixture.main()
    finally:
      make_fixture.HERE = here
    with open(os.path.join(self.path, "expected.json")) as f:
      return json.load(f)

  def __exit__(self, *exc):
    return False


def test_live_the_command_writes_a_model_ctranslate2_translates_with_the_run_pieces(tmp_path):
  ctranslate2 = _ctranslate2()
  run_dir = os.path.join(FIXTURES, "fda25e5", "run_seq2seq")
  out = tmp_path / "ct2"
  result = subprocess.run(
    [
      sys.executable,
      "-m",
      "serving.export.to_ctranslate2",
      f"--run_dir={run_dir}",
      f"--output_dir={out}",
      "--quantization=int8",
    ],
    capture_output=True,
    text=True,
    timeout=120,
  )
  assert result.returncode == 0, result.stderr
  # The vocabularies: one shared file when they are the same (they are in this run), else two.
  assert {"config.json", "model.bin", "source.model", "target.model"} <= set(os.listdir(out))
  import sentencepiece

  source = sentencepiece.SentencePieceProcessor(model_file=str(out / "source.model"))
  translator = ctranslate2.Translator(str(out), device="cpu", compute_type="int8")
  pieces = source.encode(["9 1 4", "6 3 1 7 0"], out_type=str)
  results = translator.translate_batch(pieces, beam_size=4, max_decoding_length=12)
  assert all(r.hypotheses[0] for r in results)
  float32 = ctranslate2.Translator(str(out), device="cpu", compute_type="float32")
  ours = CASES["fda25e5_run_seq2seq"]
  import engine_speed

  tokens, target_tokens = engine_speed.ctranslate2_vocabularies(str(out))
  index = {t: i for i, t in enumerate(target_tokens)}
  again = float32.translate_batch(
    [[tokens[i] for i in row] for row in ours["sources"]],
    beam_size=4,
    length_penalty=0.0,
    max_decoding_length=FIXTURE["max_decode_length"],
  )
  # Stored as int8 and computed in float32: the weights were rounded, the ids mostly hold.
  same = [
    [index[t] for t in r.hypotheses[0]] == ids for r, ids in zip(again, ours["beam_4"]["ids"])
  ]
  assert np.mean(same) >= 0.5
