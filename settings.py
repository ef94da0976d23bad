"""Declared settings: a dataclass field that carries its own help text, allowed values and range,
so that a flag, its check and its documentation all come from one declaration.

    @dataclasses.dataclass(frozen=True)
    class DecodeOptions:
      beam_size: int = setting(4, "Hypotheses kept per example.", minimum=1)

`check(options)` raises a ValueError naming the first field with an impossible value; the
command line (`cli.define_flags`) turns the same declarations into absl flags. Nothing here
knows about flags beyond the name a field has on the command line (`flag=`, default: its own).
"""

import dataclasses
from typing import Any, Callable, Dict, Iterator, Mapping, Optional, Sequence, Tuple, Union

_METADATA_KEY = "tfattn.setting"

Choices = Union[None, Sequence[Any], Callable[[], Sequence[Any]]]


@dataclasses.dataclass(frozen=True)
class Spec:
  """What a declared field allows.

  Attributes:
    help: one or two sentences for `--help`.
    choices: the allowed values, or a function returning them (a registry filled later).
    minimum, maximum: inclusive bounds.
    above, below: exclusive bounds.
    when_unset: the value an unset (None) field takes when nothing else sets it (a run's
      recipe and task come first).
    when_missing: what a save made before the field existed meant: a value, or a function of
      the saved {name: value} (e.g. another field's value); None: `when_unset`, else the
      field's default (`from_saved`).
    old_names: names the field was saved under before (read as this field by `from_saved`).
    old_values: {value saved before: what it means now}.
    unset: what leaving the field unset (None) means, in words, when the field's owner says
      it differently (e.g. "no export"); "" says nothing.
    flag: the field's name on the command line (default: the field's own name).
    extra: anything else the owner of the declaration records (e.g. a resume policy).
  """

  help: str
  choices: Choices = None
  minimum: Optional[float] = None
  maximum: Optional[float] = None
  above: Optional[float] = None
  below: Optional[float] = None
  when_unset: Any = None
  when_missing: Any = None
  old_names: Tuple[str, ...] = ()
  old_values: Mapping[Any, Any] = dataclasses.field(default_factory=dict)
  unset: Optional[str] = None
  flag: Optional[str] = None
  extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)

  def allowed(self) -> Optional[Tuple[Any, ...]]:
    """The choices as a tuple (None when any value of the type is allowed)."""
    if self.choices is None:
      return None
    return tuple(self.choices() if callable(self.choices) else self.choices)

  def range_text(self) -> str:
    """The bounds in words: "positive", ">= 0", "in [0, 1)", ... ("" when unbounded)."""
    low = (
      ("[", self.minimum)
      if self.minimum is not None
      else ("(", self.above)
      if self.above is not None
      else None
    )
    high = (
      ("]", self.maximum)
      if self.maximum is not None
      else (")", self.below)
      if self.below is not None
      else None
    )
    if low and high:
      return f"in {low[0]}{_number(low[1])}, {_number(high[1])}{high[0]}"
    if low:
      if low == ("(", 0):
        return "positive"
      return f"{'>=' if low[0] == '[' else '>'} {_number(low[1])}"
    if high:
      return f"{'<=' if high[0] == ']' else '<'} {_number(high[1])}"
    return ""

  def problem(self, value) -> Optional[str]:
    """Why `value` is not allowed ("must be ..."), or None. None values are always allowed: an
    unset field is filled later (or means "off")."""
    if value is None:
      return None
    allowed = self.allowed()
    if allowed is not None and value not in allowed:
      return f"must be one of {list(allowed)}, got {value!r}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
      return None
    in_range = (
      (self.minimum is None or value >= self.minimum)
      and (self.maximum is None or value <= self.maximum)
      and (self.above is None or value > self.above)
      and (self.below is None or value < self.below)
    )
    return None if in_range else f"must be {self.range_text()}, got {value}"


def _number(value) -> str:
  return str(int(value)) if float(value).is_integer() else str(value)


def setting(
  default,
  help: str,
  *,
  choices: Choices = None,
  minimum=None,
  maximum=None,
  above=None,
  below=None,
  when_unset=None,
  when_missing=None,
  old_names: Tuple[str, ...] = (),
  old_values: Optional[Mapping[Any, Any]] = None,
  unset: Optional[str] = None,
  flag: Optional[str] = None,
  **extra,
):
  """A dataclass field declared with its help, allowed values and bounds (see `Spec`)."""
  spec = Spec(
    help=help,
    choices=choices,
    minimum=minimum,
    maximum=maximum,
    above=above,
    below=below,
    when_unset=when_unset,
    when_missing=when_missing,
    old_names=tuple(old_names),
    old_values=dict(old_values or {}),
    unset=unset,
    flag=flag,
    extra=extra,
  )
  return dataclasses.field(default=default, metadata={_METADATA_KEY: spec})


_PART_KEY = "tfattn.part"


def part(cls):
  """A dataclass field that holds a declared class of its own (a section of a configuration),
  default `cls()`. Its settings keep their flat names: `leaves`, `from_flat`, `to_flat` and
  `from_saved` walk into it. A part may be None: a section that does not apply (its owner
  decides when, e.g. in `__post_init__`)."""
  return dataclasses.field(default_factory=cls, metadata={_PART_KEY: cls})


def parts(cls) -> Iterator[Tuple[dataclasses.Field, type]]:
  """(field, declared class) of every `part` of a declared class (or of an instance's)."""
  for field in dataclasses.fields(cls):
    if _PART_KEY in field.metadata:
      yield field, field.metadata[_PART_KEY]


def classes(cls) -> Iterator[type]:
  """`cls` and every declared class it holds as a part, at any depth."""
  yield cls
  for _, inner in parts(cls):
    yield from classes(inner)


def leaves(cls) -> Iterator[Tuple[dataclasses.Field, Spec]]:
  """(field, spec) of every declared setting of `cls` and of its parts, at any depth."""
  for inner in classes(cls):
    yield from declared(inner)


def from_flat(cls, values: Mapping[str, Any]):
  """An instance of `cls` from {flag name: value} of its settings and its parts' (missing names
  keep their defaults; a name of no setting is a ValueError)."""
  unknown = sorted(set(values) - {flag_name(field) for field, _ in leaves(cls)})
  if unknown:
    raise ValueError(f"unknown {cls.__name__} settings {unknown}")
  return _from_flat(cls, values)


def _from_flat(cls, values):
  kwargs = {
    field.name: values[flag_name(field)] for field, _ in declared(cls) if flag_name(field) in values
  }
  kwargs.update({field.name: _from_flat(inner, values) for field, inner in parts(cls)})
  return cls(**kwargs)


def to_flat(instance) -> Dict[str, Any]:
  """{flag name: value} of every setting of `instance` and of its parts that are not None."""
  flat = {flag_name(field): getattr(instance, field.name) for field, _ in declared(instance)}
  for field, _ in parts(instance):
    inner = getattr(instance, field.name)
    if inner is not None:
      flat.update(to_flat(inner))
  return flat


def spec_of(field: dataclasses.Field) -> Spec:
  """The declaration of a field; a ValueError for a field declared without `setting`."""
  try:
    return field.metadata[_METADATA_KEY]
  except KeyError:
    raise ValueError(f"field {field.name!r} is not declared with settings.setting") from None


def declared(cls) -> Iterator[Tuple[dataclasses.Field, Spec]]:
  """(field, spec) of every field of a declared dataclass (or of an instance's class), its
  `part`s left out."""
  for field in dataclasses.fields(cls):
    if _PART_KEY not in field.metadata:
      yield field, spec_of(field)


def flag_name(field: dataclasses.Field) -> str:
  return spec_of(field).flag or field.name


def problems(cls, values: Mapping[str, Any], prefix: str = "--") -> Iterator[str]:
  """One message per value in {field name: value} that its declaration in `cls` does not
  allow (an unknown field name is a problem too)."""
  fields = {field.name: (field, spec) for field, spec in declared(cls)}
  for name, value in values.items():
    if name not in fields:
      yield f"unknown setting {name!r}; known: {sorted(fields)}"
      continue
    field, spec = fields[name]
    problem = spec.problem(value)
    if problem:
      yield f"{prefix}{flag_name(field)} {problem}"


def check(instance, prefix: str = "--") -> None:
  """Raises ValueError naming the first field (as `--flag`) with a value its declaration does
  not allow, in `instance` and in its parts that are not None."""
  check_values(
    type(instance),
    {field.name: getattr(instance, field.name) for field, _ in declared(instance)},
    prefix,
  )
  for field, _ in parts(instance):
    if getattr(instance, field.name) is not None:
      check(getattr(instance, field.name), prefix)


def check_values(cls, values: Mapping[str, Any], prefix: str = "--") -> None:
  """`check` for loose {field name: value} values meant for `cls`."""
  for problem in problems(cls, values, prefix):
    raise ValueError(problem)


def unset_defaults(cls) -> Dict[str, Any]:
  """{flag name: when_unset} of the settings (its parts' too) that declare one."""
  return {
    flag_name(field): spec.when_unset for field, spec in leaves(cls) if spec.when_unset is not None
  }


def refer(cls, name: str, default=None, *, help: Optional[str] = None, to=None, **extra):
  """A field that sets another declared class's setting (a run's `d_model` sets the model's):
  its choices and bounds are `cls`'s declaration of `name`, not restated; its default, help
  (default: the declaration's), `when_unset`/`when_missing` and `extra` are this class's own.
  `to`: the fields of `cls` it sets (default: `name`), kept as `extra["refers_to"]`."""
  spec = spec_of(next(field for field in dataclasses.fields(cls) if field.name == name))
  own = {key: extra.pop(key) for key in ("when_unset", "when_missing", "unset") if key in extra}
  return setting(
    default,
    spec.help if help is None else help,
    choices=spec.choices,
    minimum=spec.minimum,
    maximum=spec.maximum,
    above=spec.above,
    below=spec.below,
    refers_to=tuple(to or (name,)),
    **own,
    **extra,
  )


def referred(instance) -> Dict[str, Any]:
  """{field of the referred class: value} of every set (not None) field declared with
  `refer`."""
  values = {}
  for field, spec in declared(instance):
    value = getattr(instance, field.name)
    for target in spec.extra.get("refers_to", ()):
      if value is not None:
        values[target] = value
  for field, _ in parts(instance):
    if getattr(instance, field.name) is not None:
      values.update(referred(getattr(instance, field.name)))
  return values


def from_saved(cls, values: Mapping[str, Any], retired: Sequence[str] = ()):
  """An instance of `cls` from {name: value} as saved, perhaps by an earlier version: a name
  the field had before (`old_names`) is read as the field, a value it had before is mapped
  (`old_values`), a field the save lacks takes `when_missing` (a value, or a function of the
  saved values), else `when_unset`, else its default; `retired` names are dropped. A
  ValueError names any other unknown name."""
  saved = dict(values)
  names = {name for field, spec in leaves(cls) for name in _saved_names(field, spec)}
  unknown = sorted(set(saved) - names - set(retired))
  if unknown:
    raise ValueError(f"Unknown {cls.__name__} fields in the saved values: {unknown}")
  return _from_saved(cls, saved)


def _saved_names(field, spec) -> Tuple[str, ...]:
  return (field.name, *((spec.flag,) if spec.flag else ()), *spec.old_names)


def _from_saved(cls, saved):
  found = {}
  for field, spec in declared(cls):
    for old in _saved_names(field, spec):
      if old in saved:
        found[field.name] = saved[old]
        break
    else:
      meant = spec.when_missing if spec.when_missing is not None else spec.when_unset
      found[field.name] = meant(saved) if callable(meant) else meant
      if found[field.name] is None:
        del found[field.name]  # the field's default
      continue
    value = found[field.name]
    if isinstance(value, (str, int, float, bool)) and value in spec.old_values:
      found[field.name] = spec.old_values[value]
  found.update({field.name: _from_saved(inner, saved) for field, inner in parts(cls)})
  return cls(**found)


def from_flags(cls, values: Mapping[str, Any], **overrides):
  """An instance of `cls` from {flag name: value} (missing names keep their defaults)."""
  kwargs = {
    field.name: values[flag_name(field)] for field, _ in declared(cls) if flag_name(field) in values
  }
  kwargs.update(overrides)
  return cls(**kwargs)


def to_flags(instance) -> Dict[str, Any]:
  """{flag name: value} of every field."""
  return {flag_name(field): getattr(instance, field.name) for field, _ in declared(instance)}
