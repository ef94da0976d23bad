"""Declared settings (`settings.py`) and the flags `cli.define_flags` makes from them."""

import cli

import dataclasses
from typing import Optional

import pytest
from absl import flags

import settings
from settings import setting


@dataclasses.dataclass(frozen=True)
class Example:
  size: int = setting(4, "How many.", minimum=1)
  rate: float = setting(0.1, "A rate.", minimum=0, below=1)
  width: Optional[int] = setting(None, "A width.", above=0, when_unset=8)
  mode: str = setting("a", "Which mode.", choices=("a", "b"), flag="example_mode")
  loud: bool = setting(False, "Shout.")
  registry: Optional[str] = setting(None, "From a registry.", choices=lambda: ["x", "y"])


@pytest.mark.parametrize(
  "changes,message",
  [
    (dict(size=0), "--size must be >= 1, got 0"),
    (dict(rate=1.0), "--rate must be in [0, 1), got 1.0"),
    (dict(rate=-0.5), "--rate must be in [0, 1), got -0.5"),
    (dict(width=0), "--width must be positive, got 0"),
    (dict(mode="c"), "--example_mode must be one of ['a', 'b'], got 'c'"),
    (dict(registry="z"), "--registry must be one of ['x', 'y'], got 'z'"),
  ],
)
def test_check_names_the_flag_the_bound_and_the_value(changes, message):
  with pytest.raises(ValueError) as error:
    settings.check(Example(**changes))
  assert str(error.value) == message


def test_check_accepts_defaults_unset_values_and_bounds():
  settings.check(Example())
  settings.check(Example(size=1, rate=0.0, width=None, mode="b", registry="y"))


def test_range_text():
  assert settings.Spec("", minimum=0).range_text() == ">= 0"
  assert settings.Spec("", above=0).range_text() == "positive"
  assert settings.Spec("", above=0, maximum=1).range_text() == "in (0, 1]"
  assert settings.Spec("", maximum=2.5).range_text() == "<= 2.5"
  assert settings.Spec("").range_text() == ""


def test_unset_defaults_and_flag_names_round_trip():
  assert settings.unset_defaults(Example) == {"width": 8}
  flat = settings.to_flags(Example(mode="b"))
  assert flat["example_mode"] == "b" and "mode" not in flat
  assert settings.from_flags(Example, flat) == Example(mode="b")


def test_an_undeclared_field_is_refused():
  @dataclasses.dataclass
  class Plain:
    x: int = 1

  with pytest.raises(ValueError, match="not declared"):
    settings.check(Plain())


def test_define_flags_makes_typed_flags_with_help_and_choices():
  values = flags.FlagValues()
  cli.define_flags(Example, unset="the task's value", flag_values=values)
  values(["prog", "--size=7", "--example_mode=b", "--loud", "--rate=0.5"])
  assert values["size"].value == 7 and values["example_mode"].value == "b"
  assert values["loud"].value is True and values["rate"].value == 0.5
  assert values["width"].value is None
  assert "default: the task's value, else 8" in values["width"].help
  assert "positive" in values["width"].help
  assert "enum" in values["registry"].flag_type()
  parsed = cli.flag_values(Example, parsed=values)
  assert parsed["mode"] == "b" and parsed["size"] == 7
  assert cli.flag_values(Example, parsed=values, only_present=True) == dict(
    size=7, mode="b", loud=True, rate=0.5
  )
  with pytest.raises(flags.IllegalFlagValueError):
    values(["prog", "--example_mode=c"])


def test_define_flags_optional_leaves_every_flag_unset():
  values = flags.FlagValues()
  cli.define_flags(Example, optional=True, unset="the run's", flag_values=values)
  values(["prog"])
  assert all(value is None for value in cli.flag_values(Example, parsed=values).values())


@dataclasses.dataclass(frozen=True)
class Saved:
  size: int = setting(4, "How many.", minimum=1)
  rate: Optional[float] = setting(None, "A rate.", when_unset=0.5)
  copy: Optional[int] = setting(None, "Added later.", when_missing=lambda saved: saved.get("size"))
  path: Optional[str] = setting(None, "Renamed.", old_names=("old_path",))
  mode: str = setting("graph", "A mode.", choices=("graph", "xla"), old_values={"auto": "graph"})


def test_from_saved_reads_what_each_declaration_says_old_saves_meant():
  loaded = settings.from_saved(
    Saved, {"size": 7, "old_path": "p", "mode": "auto", "gone": 1}, retired=("gone",)
  )
  assert loaded == Saved(size=7, rate=0.5, copy=7, path="p", mode="graph")
  assert settings.from_saved(Saved, {}) == Saved(rate=0.5)  # copy: None -> its default
  with pytest.raises(ValueError, match=r"Unknown Saved fields in the saved values: \['gone'\]"):
    settings.from_saved(Saved, {"gone": 1})


@dataclasses.dataclass(frozen=True)
class Run:
  width: Optional[int] = settings.refer(Example, "width")
  both: Optional[int] = settings.refer(Example, "size", help="Two at once.", to=("size", "size2"))


def test_a_referring_field_takes_the_declarations_bounds_and_hands_its_value_on():
  width, both = (spec for _, spec in settings.declared(Run))
  assert (width.help, width.above, width.when_unset) == ("A width.", 0, None)
  assert (both.help, both.minimum) == ("Two at once.", 1)
  with pytest.raises(ValueError, match="--both must be >= 1, got 0"):
    settings.check(Run(both=0))
  assert settings.referred(Run(both=3)) == {"size": 3, "size2": 3}
