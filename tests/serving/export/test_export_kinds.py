"""The export's kind interface: every registered kind satisfies `export.ExportKind`."""

import inspect

from serving import export
from tfattn import kinds


def _parameters(function):
  return list(inspect.signature(function).parameters)


def test_every_export_kind_satisfies_the_protocol():
  assert set(export.EXPORT_KINDS) == {kinds.SEQ2SEQ, kinds.CLASSIFICATION, kinds.LANGUAGE_MODEL}
  for name, kind in export.EXPORT_KINDS.items():
    assert kind.name == name
    assert isinstance(kind.vocabulary_sides, tuple) and kind.vocabulary_sides
    for method in ("build_model", "export_module"):
      protocol = _parameters(getattr(export.ExportKind, method))[1:]  # without self
      assert _parameters(getattr(kind, method)) == protocol, (name, method)
