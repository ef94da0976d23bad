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
