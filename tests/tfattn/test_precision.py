"""tfattn.precision.for_serving: a model's copy that stores its matmul weights and computes in
bfloat16 or float16, its norms, softmax and logits float32, answering as the float32 model
within the low dtype's rounding."""

import numpy as np
import pytest
import tensorflow as tf

import tfattn
from tfattn import decoding, layers, precision


def _trained_like(config):
  """A random model whose weights are not at their initial values (biases and norms too)."""
  model = tfattn.Transformer(config)
  rng = np.random.default_rng(0)
  for variable in model.trainable_variables:
    variable.assign(variable + rng.normal(0, 0.02, variable.shape).astype("float32"))
  return model


@pytest.fixture(scope="module")
def model():
  config = tfattn.TransformerConfig.preset(
    "tiny", source_vocab_size=50, target_vocab_size=60, d_model=32, dff=64, num_heads=4
  )
  return _trained_like(config)


def _logits(model, source, target):
  return model(tf.constant(source), tf.constant(target)).numpy()


SOURCE = [[5, 6, 7, 8, 9, 0], [10, 11, 12, 0, 0, 0]]
TARGET = [[1, 20, 21, 22], [1, 30, 31, 0]]


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_the_low_copy_stores_matmul_weights_low_and_norms_in_float32(model, dtype):
  low = precision.for_serving(model, tfattn.Transformer, dtype)
  assert low.config.compute_dtype == dtype
  for module in low.submodules:
    if isinstance(module, layers.Linear):
      assert module.kernel.dtype == dtype and module.bias.dtype == dtype
    if isinstance(module, layers.Embedding):
      assert module.table.dtype == dtype
    if isinstance(module, layers.LayerNorm):
      assert module.scale.dtype == module.offset.dtype == tf.float32
  logits = _logits(low, SOURCE, TARGET)
  assert logits.dtype == np.float32  # the logits leave in float32
  reference = _logits(model, SOURCE, TARGET)
  tolerance = 0.05 if dtype == "bfloat16" else 0.005  # 8 and 11 bits of mantissa
  np.testing.assert_allclose(logits, reference, atol=tolerance * np.abs(reference).max())
  assert not np.array_equal(logits, reference)  # it did compute in the low dtype


def test_float32_gives_the_same_logits_and_the_trained_weights_are_untouched(model):
  before = [v.numpy().copy() for v in model.variables]
  same = precision.for_serving(model, tfattn.Transformer, "float32")
  np.testing.assert_allclose(_logits(same, SOURCE, TARGET), _logits(model, SOURCE, TARGET))
  precision.for_serving(model, tfattn.Transformer, "bfloat16")
  for value, variable in zip(before, model.variables):
    np.testing.assert_array_equal(value, variable.numpy())


@pytest.mark.slow  # XLA compiles
def test_the_low_copy_decodes_in_graph_mode_and_under_xla(model):
  low = precision.for_serving(model, tfattn.Transformer, "bfloat16")
  source = tf.constant(SOURCE)

  def search(x, padded):
    return decoding.beam_decode(low, x, beam_size=2, max_decode_length=6, padded_decode=padded)

  graph = tf.function(lambda x: search(x, False), autograph=False)(source)
  compiled = tf.function(lambda x: search(x, True), jit_compile=True, autograph=False)(source)
  assert graph.scores.dtype == compiled.scores.dtype == tf.float32
  assert graph.ids.shape == compiled.ids.shape == (2, 2, 6)


def test_an_unknown_dtype_is_refused(model):
  with pytest.raises(ValueError, match="serving dtype must be one of float32, bfloat16, float16"):
    precision.for_serving(model, tfattn.Transformer, "int8")
