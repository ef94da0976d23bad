"""`DecodeOptions`: one declaration, checked on construction, JSON round trip."""

import pytest

import settings
from tfattn.decode_options import BEAM, STRATEGIES, DecodeOptions


def test_defaults_are_the_papers_beam_search():
  options = DecodeOptions()
  assert (options.strategy, options.beam_size, options.alpha) == (BEAM, 4, 0.6)
  assert set(STRATEGIES) == {"greedy", "beam", "sample"}


@pytest.mark.parametrize(
  "changes,message",
  [
    (dict(beam_size=0), "beam_size must be >= 1, got 0"),
    (dict(strategy="nucleus"), "decode_strategy must be one of"),
    (dict(temperature=0.0), "temperature must be positive, got 0.0"),
    (dict(top_p=1.5), "top_p must be in (0, 1], got 1.5"),
    (dict(top_k=-1), "top_k must be >= 0, got -1"),
    (dict(max_decode_length=0), "max_decode_length must be >= 1, got 0"),
    (dict(seed=-1), "sample_seed must be in [0, 9223372036854775807], got -1"),
    (dict(length_penalty="wu"), "length_penalty must be one of"),
    (dict(beam_stop="early"), "beam_stop must be one of"),
    (dict(min_decode_length=-1), "min_decode_length must be >= 0, got -1"),
    (dict(never_generate="3,x"), "never_generate must be comma-separated token ids"),
    (dict(never_generate="-2"), "never_generate must be comma-separated token ids"),
  ],
)
def test_impossible_values_are_refused_on_construction(changes, message):
  with pytest.raises(
    ValueError, match=message.replace("(", r"\(").replace("]", r"\]").replace("[", r"\[")
  ):
    DecodeOptions(**changes)


def test_dict_round_trip_and_unknown_fields():
  options = DecodeOptions(strategy="sample", top_k=5, seed=3)
  assert DecodeOptions.from_dict(options.to_dict()) == options
  with pytest.raises(ValueError, match="unknown DecodeOptions fields"):
    DecodeOptions.from_dict({"beam": 4})


def test_options_of_a_run_new_and_old():
  options = DecodeOptions(strategy="sample", top_p=0.9)
  assert DecodeOptions.of_run({"decode": options.to_dict()}) == options
  # Run directories written before DecodeOptions existed.
  assert DecodeOptions.of_run({"eval_beam_size": 4, "eval_alpha": 0.8}) == DecodeOptions(
    strategy="beam", beam_size=4, alpha=0.8
  )
  assert DecodeOptions.of_run({"eval_beam_size": None, "eval_alpha": 0.6}).strategy == "greedy"
  assert DecodeOptions.of_run({"eval_beam_size": 1}).strategy == "greedy"
  # translate_nbest of an export of a greedy run still returns the default number of beams.
  assert DecodeOptions.of_run({}).beam_size == DecodeOptions().beam_size


def test_options_saved_before_the_marian_fields_keep_their_meaning():
  """An export's or a run's options saved before length_penalty, beam_stop, min_decode_length,
  never_generate and end_at_limit existed: each takes its declared when_missing (what the save
  meant: the GNMT penalty, the exact stop, no rule)."""
  import settings

  later = {
    field.name: spec.when_missing
    for field, spec in settings.declared(DecodeOptions)
    if spec.when_missing is not None
  }
  assert set(later) == {
    "length_penalty",
    "beam_stop",
    "min_decode_length",
    "never_generate",
    "end_at_limit",
  }
  saved = {k: v for k, v in DecodeOptions(beam_size=5).to_dict().items() if k not in later}
  assert DecodeOptions.from_dict(saved) == DecodeOptions(beam_size=5)
  assert DecodeOptions(never_generate="7, 3").banned_ids == (7, 3)
  assert DecodeOptions().banned_ids == ()


def test_every_option_declares_the_strategies_that_read_it():
  """Issue 49: a run's start shows an option to the strategies that read it
  (`DecodeOptions.read`); an option cannot be declared without saying which."""
  from tfattn import decode_options

  for field, spec in settings.declared(DecodeOptions):
    assert spec.extra["read_by"] and set(spec.extra["read_by"]) <= set(STRATEGIES), field.name
  with pytest.raises(TypeError):
    decode_options.option(1, "no strategies")  # pylint: disable=missing-kwoa
  with pytest.raises(ValueError, match="read_by must name some of"):
    decode_options.option(1, "a strategy nobody knows", read_by=("lucky",))
  assert set(DecodeOptions(strategy="greedy").read()) < set(DecodeOptions(strategy="beam").read())
  assert "beam_size" not in DecodeOptions(strategy="sample").read()
  assert {"temperature", "seed"} <= set(DecodeOptions(strategy="sample").read())
