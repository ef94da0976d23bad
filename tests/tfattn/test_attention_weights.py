"""Attention weights from `Transformer` and `EncoderClassifier` (`return_attention=True`): the
weights each layer used, masked where they must be, float32 in every precision, graph-safe, and
no extra work when not asked."""

import collections

import numpy as np
import pytest
import tensorflow as tf

import tfattn
from tfattn.attention import CrossAttention, SelfAttention, merge_heads
from tfattn.transformer import AttentionWeights

from conftest import random_ids

SPEC = tf.TensorSpec([None, None], tf.int32)
# Source rows: 2 padding keys at the end; a fully padded row; no padding.
SOURCE = tf.constant([[5, 6, 7, 8, 0, 0], [0, 0, 0, 0, 0, 0], [9, 10, 11, 12, 13, 14]])
SOURCE_VALID = tf.cast(tf.not_equal(SOURCE, 0), tf.float32)  # [batch, s_len]


@pytest.fixture
def config(tiny_config):
  return tiny_config.replace(
    num_encoder_layers=2, num_decoder_layers=3, dropout_rate=0.1, attention_dropout_rate=0.1
  )


@pytest.fixture
def recorded(monkeypatch):
  """Every attention call as (module, inputs, output): what each layer actually computed."""
  calls = []
  for cls in (SelfAttention, CrossAttention):
    original = cls.__call__

    def record(self, *args, _original=original, **kwargs):
      output = _original(self, *args, **kwargs)
      calls.append((self, args, kwargs, output[0] if isinstance(output, tuple) else output))
      return output

    monkeypatch.setattr(cls, "__call__", record)
  return calls


def _values(module, args, kwargs):
  """The values `[batch, heads, k_len, depth]` a recorded call attended over, recomputed from
  the module's own projections."""
  if isinstance(module, SelfAttention):
    return module._split_fused(module.query_key_value(args[0]), 3)[2]
  memory = args[1] if len(args) > 1 else kwargs["memory"]
  return module.project_memory(memory).value


def _assert_weights_reproduce_outputs(calls, weights):
  assert len(calls) == len(weights)
  for (module, args, kwargs, output), layer_weights in zip(calls, weights):
    values = _values(module, args, kwargs)
    rebuilt = module.output(merge_heads(tf.matmul(layer_weights, values)))
    np.testing.assert_allclose(rebuilt, output, atol=1e-5)


def test_transformer_weights_reproduce_every_layers_attention_output(config, recorded):
  model = tfattn.Transformer(config)
  target = random_ids(3, 5, 40, 2)
  logits, weights = model(SOURCE, target, return_attention=True)
  assert isinstance(weights, AttentionWeights)
  assert (len(weights.encoder), len(weights.decoder), len(weights.cross)) == (2, 3, 3)
  # Call order: encoder layers, then each decoder layer's self- then cross-attention.
  encoder_calls, decoder_calls = recorded[:2], recorded[2:]
  _assert_weights_reproduce_outputs(encoder_calls, weights.encoder)
  _assert_weights_reproduce_outputs(decoder_calls[0::2], weights.decoder)
  _assert_weights_reproduce_outputs(decoder_calls[1::2], weights.cross)
  np.testing.assert_allclose(logits, model(SOURCE, target), atol=1e-6)


@pytest.mark.parametrize("body", ["transformer", "attention"])
def test_classifier_weights_reproduce_its_attention_output(config, recorded, body):
  classifier = tfattn.EncoderClassifier(config.replace(classifier_body=body))
  logits, weights = classifier(SOURCE, return_attention=True)
  assert weights.decoder == () and weights.cross == ()
  assert len(weights.encoder) == (2 if body == "transformer" else 1)
  _assert_weights_reproduce_outputs(recorded, weights.encoder)
  np.testing.assert_allclose(logits, classifier(SOURCE), atol=1e-6)


def _assert_rows_sum_to_one(weights, empty_rows=()):
  """Every query's weights sum to one, but a query of an `empty_rows` example, which has no
  key to see: its weights are zero (it attends to nothing, as over zero keys)."""
  sums = tf.reduce_sum(weights, axis=-1).numpy()  # [batch, heads, q_len]
  expected = np.ones_like(sums)
  expected[list(empty_rows)] = 0.0
  np.testing.assert_allclose(sums, expected, atol=1e-5)


def test_masks_zero_padding_and_future_keys_and_rows_sum_to_one(config):
  model = tfattn.Transformer(config)
  target = random_ids(3, 5, 40, 3)
  _, weights = model(SOURCE, target, return_attention=True)
  padded_keys = (1.0 - SOURCE_VALID)[:, tf.newaxis, tf.newaxis, :]  # [batch, 1, 1, s_len]
  future = 1.0 - tf.linalg.band_part(tf.ones([5, 5]), -1, 0)  # [t_len, t_len]
  for layer_weights in weights.encoder + weights.cross:
    assert layer_weights.dtype == tf.float32
    _assert_rows_sum_to_one(layer_weights, empty_rows=[1])
    rows_with_keys = tf.gather(layer_weights * padded_keys, [0, 2])  # row 1 has no real key
    assert float(tf.reduce_max(rows_with_keys)) == 0.0
  for layer_weights in weights.decoder:
    assert layer_weights.shape == (3, config.num_heads, 5, 5)
    _assert_rows_sum_to_one(layer_weights)
    assert float(tf.reduce_max(layer_weights * future)) == 0.0
  # The fully padded source row: every key masked, it attends to nothing (zero weights).
  for layer_weights in weights.encoder + weights.cross:
    assert float(tf.reduce_max(tf.abs(layer_weights[1]))) == 0.0


@pytest.mark.parametrize("body", ["transformer", "attention"])
def test_classifier_masks_padding_keys(config, body):
  classifier = tfattn.EncoderClassifier(config.replace(classifier_body=body))
  _, weights = classifier(SOURCE, return_attention=True)
  padded_keys = (1.0 - SOURCE_VALID)[:, tf.newaxis, tf.newaxis, :]
  for layer_weights in weights.encoder:
    assert layer_weights.shape == (3, config.num_heads, 6, 6)
    _assert_rows_sum_to_one(layer_weights, empty_rows=[1])
    assert float(tf.reduce_max(tf.gather(layer_weights * padded_keys, [0, 2]))) == 0.0


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_mixed_precision_weights_are_float32(config, dtype):
  model = tfattn.Transformer(config.replace(compute_dtype=dtype))
  classifier = tfattn.EncoderClassifier(config.replace(compute_dtype=dtype))
  _, weights = model(SOURCE, random_ids(3, 4, 40, 4), return_attention=True)
  _, classifier_weights = classifier(SOURCE, return_attention=True)
  for layer_weights in tf.nest.flatten([weights, classifier_weights]):
    assert layer_weights.dtype == tf.float32
    assert bool(tf.reduce_all(tf.math.is_finite(layer_weights)))
    # The fully padded source row attends to nothing in the encoder and cross-attention.
    empty = [1] if layer_weights.shape[-1] == SOURCE.shape[1] else []
    _assert_rows_sum_to_one(layer_weights, empty_rows=empty)


def test_graph_mode_without_retrace_across_shapes(config):
  model = tfattn.Transformer(config)
  classifier = tfattn.EncoderClassifier(config)
  forward = tf.function(
    lambda s, t: model(s, t, return_attention=True), input_signature=[SPEC, SPEC], autograph=False
  )
  classify = tf.function(
    lambda s: classifier(s, return_attention=True), input_signature=[SPEC], autograph=False
  )
  for batch, source_len, target_len in [(2, 5, 3), (1, 9, 7)]:
    source, target = random_ids(batch, source_len, 40, 5), random_ids(batch, target_len, 40, 6)
    logits, weights = forward(source, target)
    eager_logits, eager_weights = model(source, target, return_attention=True)
    np.testing.assert_allclose(logits, eager_logits, atol=1e-5)
    for graph, eager in zip(tf.nest.flatten(weights), tf.nest.flatten(eager_weights)):
      np.testing.assert_allclose(graph, eager, atol=1e-5)
    assert weights.cross[0].shape == (batch, config.num_heads, target_len, source_len)
    _, encoder_weights = classify(source)
    assert encoder_weights.encoder[1].shape == (batch, config.num_heads, source_len, source_len)
  assert forward.experimental_get_tracing_count() == 1
  assert classify.experimental_get_tracing_count() == 1


def _op_census(function, *specs):
  graph = (
    tf.function(function, input_signature=list(specs), autograph=False)
    .get_concrete_function()
    .graph
  )
  return collections.Counter(op.type for op in graph.get_operations())


def test_returning_the_weights_adds_no_computation(config):
  """The training graph with and without `return_attention` runs the same ops: the weights
  are the softmax outputs the forward pass computes anyway (only the function's output
  plumbing, Identity ops, differs)."""
  model = tfattn.Transformer(config)
  classifier = tfattn.EncoderClassifier(config)
  plain = _op_census(lambda s, t: model(s, t, training=True), SPEC, SPEC)
  with_weights = _op_census(
    lambda s, t: model(s, t, training=True, return_attention=True), SPEC, SPEC
  )
  extra = with_weights - plain
  assert set(extra) == {"Identity"} and extra["Identity"] == 2 + 3 + 3
  assert not plain - with_weights
  plain = _op_census(lambda s: classifier(s, training=True), SPEC)
  with_weights = _op_census(lambda s: classifier(s, training=True, return_attention=True), SPEC)
  assert with_weights - plain == collections.Counter({"Identity": 2})
  assert not plain - with_weights
