"""Transformer / EncoderClassifier: masking invariances, graph mode, XLA, and learning."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfattn
from tfattn import losses

from conftest import random_ids

SPEC = tf.TensorSpec([None, None], tf.int32)


def test_output_shapes_and_dtype(tiny_model, tiny_config):
  logits = tiny_model(random_ids(3, 7, 40, 1), random_ids(3, 5, 40, 2))
  assert logits.shape == (3, 5, tiny_config.target_vocab_size)
  assert logits.dtype == tf.float32


def test_padding_tokens_do_not_change_unpadded_outputs(tiny_model):
  source = random_ids(2, 8, 40, 3)
  target = random_ids(2, 6, 40, 4)
  pad_tail = tf.constant([[1] * 5 + [0] * 3] * 2)
  padded_a = source * pad_tail
  # Same sequences, different junk "behind" the padding: only pad ids change -> identical.
  shorter = padded_a[:, :5]
  np.testing.assert_allclose(tiny_model(padded_a, target), tiny_model(shorter, target), atol=1e-5)


def test_more_trailing_padding_changes_no_classifier_output(tiny_config):
  classifier = tfattn.EncoderClassifier(tiny_config)
  ids = tf.constant([[5, 6, 7, 0, 0]])
  longer = tf.constant([[5, 6, 7, 0, 0, 0, 0, 0]])
  np.testing.assert_allclose(classifier(ids), classifier(longer), atol=1e-5)


def test_decoder_is_causal(tiny_model):
  source = random_ids(2, 6, 40, 5)
  target = random_ids(2, 7, 40, 6)
  changed = tf.concat([target[:, :4], (target[:, 4:] + 1) % 37 + 3], axis=1)
  before = tiny_model(source, target)
  after = tiny_model(source, changed)
  np.testing.assert_allclose(before[:, :4], after[:, :4], atol=1e-5)
  assert float(tf.reduce_max(tf.abs(before[:, 4:] - after[:, 4:]))) > 1e-3


@pytest.mark.slow
@pytest.mark.parametrize(
  "norm_position,position_encoding", [("post", "sinusoidal"), ("pre", "learned")]
)
def test_no_retrace_across_shapes_and_xla_matches_graph(
  tiny_config, norm_position, position_encoding
):
  config = tiny_config.replace(norm_position=norm_position, position_encoding=position_encoding)
  model = tfattn.Transformer(config)
  graph = tf.function(model.__call__, input_signature=[SPEC, SPEC], autograph=False)
  xla = tf.function(model.__call__, input_signature=[SPEC, SPEC], jit_compile=True, autograph=False)
  for batch, source_len, target_len in [(2, 5, 3), (3, 9, 4), (1, 2, 11)]:
    source, target = random_ids(batch, source_len, 40, 7), random_ids(batch, target_len, 40, 8)
    expected = model(source, target)
    np.testing.assert_allclose(graph(source, target), expected, atol=1e-5)
    np.testing.assert_allclose(xla(source, target), expected, atol=1e-4)
  assert graph.experimental_get_tracing_count() == 1
  assert xla.experimental_get_tracing_count() == 1


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_mixed_precision_forward_is_finite(tiny_config, dtype):
  model = tfattn.Transformer(tiny_config.replace(compute_dtype=dtype))
  source = tf.constant([[5, 6, 7, 0, 0], [0, 0, 0, 0, 0]])  # second source fully padded
  logits = model(source, random_ids(2, 4, 40, 9))
  assert logits.dtype == tf.float32
  assert bool(tf.reduce_all(tf.math.is_finite(logits)))
  reference = tfattn.Transformer(tiny_config)(source[:1], random_ids(2, 4, 40, 9)[:1])
  np.testing.assert_allclose(logits[:1], reference, atol=0.15)


def test_classifier_shapes_pooling_and_graph(tiny_config):
  for pooling in ("mean", "first"):
    classifier = tfattn.EncoderClassifier(tiny_config.replace(pooling=pooling, num_classes=3))
    fn = tf.function(classifier.__call__, input_signature=[SPEC], jit_compile=True, autograph=False)
    logits = fn(tf.constant([[5, 6, 0], [0, 0, 0]]))
    assert logits.shape == (2, 3)
    assert bool(tf.reduce_all(tf.math.is_finite(logits)))


def test_dropout_is_active_only_in_training(tiny_config):
  model = tfattn.Transformer(tiny_config.replace(dropout_rate=0.3))
  source, target = random_ids(2, 6, 40, 10), random_ids(2, 5, 40, 11)
  np.testing.assert_array_equal(model(source, target), model(source, target))
  assert (
    float(tf.reduce_max(tf.abs(model(source, target, training=True) - model(source, target))))
    > 1e-3
  )


@pytest.mark.parametrize("body", ["transformer", "attention"])
def test_attention_dropout_is_active_in_every_classifier_body(tiny_config, body):
  """Issue 33: the attention body built its attention without the model's generator, so
  attention dropout did nothing. With only attention dropout on, two training passes differ;
  inference passes, and training passes at rate 0, do not."""
  ids = random_ids(2, 7, 40, 12)
  config = tiny_config.replace(classifier_body=body, dropout_rate=0.0)
  model = tfattn.EncoderClassifier(config.replace(attention_dropout_rate=0.5))
  assert float(tf.reduce_max(tf.abs(model(ids, training=True) - model(ids, training=True)))) > 1e-4
  np.testing.assert_array_equal(model(ids), model(ids))
  still = tfattn.EncoderClassifier(config)
  np.testing.assert_array_equal(still(ids, training=True), still(ids, training=True))


def test_shared_embeddings_and_untied_output(tiny_config):
  shared = tfattn.Transformer(tiny_config.replace(share_embeddings=True))
  untied = tfattn.Transformer(tiny_config.replace(tie_output_embedding=False))
  assert shared.encoder.embedding is shared.decoder.embedding
  default_count = len(tfattn.Transformer(tiny_config).trainable_variables)
  assert len(shared.trainable_variables) == default_count - 1  # one embedding table
  assert len(untied.trainable_variables) == default_count + 2  # output kernel and bias
  assert untied(random_ids(1, 3, 40, 1), random_ids(1, 2, 40, 2)).shape == (1, 2, 40)


def test_variable_names_are_readable(tiny_model):
  names = {v.name for v in tiny_model.trainable_variables}
  assert "transformer/encoder/layer_0/self_attention/query_key_value/kernel:0" in names
  assert "transformer/decoder/layer_1/cross_attention/key_value/kernel:0" in names


@pytest.mark.parametrize("padded", [False, True])
def test_decode_step_equals_teacher_forced_decoding(tiny_model, padded):
  """Stepping through a target token by token, the position carried as `step`, gives the
  teacher-forced logits at every position, in both cache layouts."""
  source, target = random_ids(2, 5, 40, 12), random_ids(2, 6, 40, 13)
  memory, memory_bias = tiny_model.encode(source)
  expected = tiny_model.decode(target, memory, memory_bias)  # [2, 6, vocab]
  decoding_memory = tiny_model.decoding_memory(memory, memory_bias)
  cache = tiny_model.init_cache(2, max_length=8 if padded else None)
  step_logits = []
  for step in range(6):
    logits, cache = tiny_model.decode_step(
      target[:, step], tf.constant(step), cache, decoding_memory
    )
    step_logits.append(logits)
  np.testing.assert_allclose(tf.stack(step_logits, axis=1), expected, atol=1e-4)


@pytest.mark.parametrize("padded", [False, True])
def test_decode_step_does_not_mutate_its_input_cache(tiny_model, padded):
  memory, memory_bias = tiny_model.encode(random_ids(2, 5, 40, 14))
  decoding_memory = tiny_model.decoding_memory(memory, memory_bias)
  cache = tiny_model.init_cache(2, max_length=4 if padded else None)
  _, cache = tiny_model.decode_step(tf.constant([1, 1]), tf.constant(0), cache, decoding_memory)
  tensors_before = tf.nest.flatten(cache)
  values_before = [t.numpy() for t in tensors_before]
  _, new_cache = tiny_model.decode_step(tf.constant([5, 6]), tf.constant(1), cache, decoding_memory)
  tf.nest.assert_same_structure(cache, new_cache)
  for before, after, value in zip(tensors_before, tf.nest.flatten(cache), values_before):
    assert after is before
    np.testing.assert_array_equal(after, value)
  new_key = new_cache[0].key
  assert new_key.shape[2] == (4 if padded else 2)
  np.testing.assert_array_equal(new_key[:, :, :1], cache[0].key[:, :, :1])
  assert float(tf.reduce_max(tf.abs(new_key[:, :, 1]))) > 1e-3  # position 1, new only


@pytest.mark.slow
def test_copy_task_loss_falls():
  """A few hundred steps on a tiny copy task: the loss must fall by an order of magnitude."""
  config = tfattn.TransformerConfig.preset(
    "tiny",
    source_vocab_size=14,
    target_vocab_size=14,
    d_model=32,
    dff=64,
    num_encoder_layers=1,
    num_decoder_layers=1,
  )
  model = tfattn.Transformer(config)
  optimizer = keras.optimizers.Adam(3e-3)

  @tf.function(input_signature=[SPEC], autograph=False)
  def train_step(source):
    decoder_input = tf.concat([tf.fill([tf.shape(source)[0], 1], config.bos_id), source], 1)
    labels = tf.concat([source, tf.fill([tf.shape(source)[0], 1], config.eos_id)], 1)
    with tf.GradientTape() as tape:
      token_losses, weights = losses.label_smoothed_cross_entropy(
        model(source, decoder_input, training=True), labels
      )
      loss = tf.reduce_sum(token_losses) / tf.reduce_sum(weights)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss

  history = [float(train_step(random_ids(32, 6, 14, step))) for step in range(300)]
  first, last = np.mean(history[:10]), np.mean(history[-10:])
  assert last < 0.1 * first, (first, last)


def test_output_bias_is_added_to_every_logit(tiny_config):
  model = tfattn.Transformer(tiny_config.replace(output_bias=True))
  plain = tfattn.Transformer(tiny_config)
  assert model.output_bias.shape == (tiny_config.target_vocab_size,)
  source, target = random_ids(2, 5, 40, 0), random_ids(2, 4, 9, 1)
  bias = np.random.default_rng(0).normal(size=[tiny_config.target_vocab_size]).astype("float32")
  model.output_bias.assign(bias)
  np.testing.assert_allclose(model(source, target), plain(source, target) + bias, atol=1e-5)
  language_model = tfattn.LanguageModel(tiny_config.replace(output_bias=True))
  assert language_model.output_bias is not None
  # An untied projection has its own bias: no second one.
  untied = tfattn.Transformer(tiny_config.replace(output_bias=True, tie_output_embedding=False))
  assert untied.output_bias is None and untied.output_projection.bias is not None


def test_layer_norm_epsilon_reaches_every_norm(tiny_config):
  from tfattn.layers import LayerNorm

  config = tiny_config.replace(layer_norm_epsilon=1e-5)
  for model in (
    tfattn.Transformer(config),
    tfattn.Transformer(config.replace(norm_position="pre")),
    tfattn.LanguageModel(config.replace(norm_position="pre")),
    tfattn.EncoderClassifier(config),
  ):
    norms = [m for m in model.submodules if isinstance(m, LayerNorm)]
    assert norms and {norm.epsilon for norm in norms} == {1e-5}, type(model).__name__
