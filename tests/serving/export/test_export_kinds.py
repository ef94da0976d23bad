"""The export's kind interface: every registered kind satisfies `export.ExportKind`."""

import inspect

from serving import export
from tfattn import kinds


def _parameters(function):
  return list(inspect.signature(function).parameters)


def test_every_export_kind_satisfies_the_protocol():
  assert set(export.EXPORT_KINDS) == set(kinds.MODEL_KINDS)  # a new kind: no line here
  for name, kind in export.EXPORT_KINDS.items():
    assert kind.name == name
    assert isinstance(kind.vocabulary_sides, tuple) and kind.vocabulary_sides
    for method in ("build_model", "export_module"):
      protocol = _parameters(getattr(export.ExportKind, method))[1:]  # without self
      assert _parameters(getattr(kind, method)) == protocol, (name, method)


def test_the_exports_decode_with_no_repeat_ngram_size(trained_run):
  """A decoding option travels whole to the export: its searches ban repeats as the library's
  do, with the model's log-probabilities (issue 40)."""
  import numpy as np
  import tensorflow as tf

  from tfattn import decoding
  from tfattn.decode_options import DecodeOptions

  trained = export.load_trained(str(trained_run))
  source = tf.constant([[5, 6, 7, 8], [9, 9, 9, 0]], tf.int32)
  for strategy in ("greedy", "beam"):
    options = DecodeOptions(strategy=strategy, beam_size=2, no_repeat_ngram_size=1)
    module = export.EXPORT_KINDS["seq2seq"].export_module(
      trained.model, trained.tokenizers, trained.task_info, options, "graph"
    )
    served = module.translate_ids(source)
    expected = decoding.decode(trained.model, source, options)
    np.testing.assert_array_equal(served["ids"].numpy(), expected.ids.numpy())
    np.testing.assert_allclose(served["log_prob"].numpy(), expected.log_probs.numpy(), atol=1e-5)
    for row in served["ids"].numpy().tolist():  # n = 1: no token twice (padding aside)
      tokens = [t for t in row if t != 0]
      assert len(tokens) == len(set(tokens))
