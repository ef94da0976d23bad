"""How a run setting is declared: `settings.setting` plus its resume policy, or a reference to
the model's own declaration (`model_setting`); and how the settings are shown at start."""

import dataclasses

import settings
from tfattn.config import PRESETS, TransformerConfig

# Resume policies.
MUST_MATCH = "must match"  # decides what is learned: a resumed run must keep the value
MAY_CHANGE = "may change"  # how long, how often, how it is judged or exported
FOLLOWS_MACHINE = "follows the machine"  # devices and precision: this command's value
RESUME_POLICIES = (MUST_MATCH, MAY_CHANGE, FOLLOWS_MACHINE)

# TransformerConfig fields a preset sizes: an unset run value keeps the preset's.
_PRESET_SIZED = frozenset(name for preset in PRESETS.values() for name in preset)


def _check_policy(resume: str) -> None:
  if resume not in RESUME_POLICIES:
    raise ValueError(f"resume policy must be one of {RESUME_POLICIES}, got {resume!r}")


def run_setting(default, help: str, *, resume: str, **checks):
  """A run setting: `settings.setting` plus its resume policy (required)."""
  _check_policy(resume)
  return settings.setting(default, help, resume=resume, **checks)


def model_setting(name: str, help=None, *, resume: str, default=None, to=None, **own):
  """A run setting that sets `TransformerConfig.<name>` (or the fields `to` names): its choices,
  bounds and, unless a preset sizes it, its unset value are the model's declaration
  (`settings.refer`), never restated. Default None: the recipe's, then the task's, then the
  preset's or the model's value."""
  _check_policy(resume)
  model_default = {f.name: f.default for f in dataclasses.fields(TransformerConfig)}[name]
  if name not in _PRESET_SIZED and model_default is not None:
    own.setdefault("when_unset", model_default)
  return settings.refer(TransformerConfig, name, default, help=help, to=to, resume=resume, **own)


def resume_policy(field: dataclasses.Field) -> str:
  return settings.spec_of(field).extra.get("resume")


def columns(items, width: int = 100) -> str:
  """`name=value` items in aligned columns (a long one on a line of its own, after them)."""
  short = [item for item in items if len(item) <= 30]
  column = max((len(item) for item in short), default=0) + 2
  per_row = max(1, (width - 2) // column)
  rows = [short[i : i + per_row] for i in range(0, len(short), per_row)]
  lines = ["  " + "".join(item.ljust(column) for item in row).rstrip() for row in rows]
  return "\n".join(lines + ["  " + item for item in items if len(item) > 30])
