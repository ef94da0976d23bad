"""tfattn.layers: dropout in graph mode and under XLA."""

import numpy as np
import pytest
import tensorflow as tf

from tfattn import layers


@pytest.mark.parametrize("jit_compile", [False, True])
def test_dropout_drops_the_rate_and_rescales_the_rest(jit_compile):
  rng = tf.random.Generator.from_seed(3)
  x = tf.ones([256, 512])
  drop = tf.function(lambda: layers.dropout(x, 0.25, rng, training=True),
                     jit_compile=jit_compile)
  first, second = drop().numpy(), drop().numpy()
  assert set(np.unique(first)) <= {0.0, np.float32(1 / 0.75)}
  assert abs(np.mean(first == 0) - 0.25) < 0.01
  assert abs(first.mean() - 1.0) < 0.02  # inverted dropout keeps the expectation
  assert not np.array_equal(first, second)  # the generator advances
  assert layers.dropout(x, 0.25, rng, training=False) is x


def test_dropout_keeps_bfloat16():
  rng = tf.random.Generator.from_seed(3)
  y = layers.dropout(tf.ones([8, 8], tf.bfloat16), 0.5, rng, training=True)
  assert y.dtype == tf.bfloat16


@pytest.mark.parametrize("rate", [0.0, 0.5])
def test_feed_forward_drops_its_hidden_layer_only_when_asked(rate):
  """The paper drops sublayer outputs only; tensor2tensor also drops the ReLU layer."""
  rng = tf.random.Generator.from_seed(3)
  ffn = layers.FeedForward(16, 64, dropout_rate=rate, rng=rng, seed=1)
  x = tf.random.stateless_normal([4, 7, 16], [1, 2])
  trained, inferred = ffn(x, training=True), ffn(x, training=False)
  assert trained.shape == x.shape
  if rate:
    assert not np.allclose(trained, inferred)
  else:
    np.testing.assert_array_equal(trained.numpy(), inferred.numpy())


def test_transformer_feed_forward_dropout_follows_its_own_rate():
  import tfattn
  paper = tfattn.TransformerConfig.preset("tiny", dropout_rate=0.1)
  t2t = tfattn.TransformerConfig.preset("tiny", dropout_rate=0.1, feed_forward_dropout_rate=0.1)
  for config, expected in ((paper, 0.0), (t2t, 0.1)):
    layer = tfattn.Transformer(config).encoder.layers[0]
    assert layer.feed_forward.dropout_rate == expected
    assert layer.dropout_rate == 0.1
  with pytest.raises(ValueError, match="feed_forward_dropout_rate"):
    tfattn.TransformerConfig(feed_forward_dropout_rate=1.0)
