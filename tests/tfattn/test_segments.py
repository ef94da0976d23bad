"""Packed rows: positions restart per segment, and a query sees only its own segment's keys."""

import numpy as np
import tensorflow as tf

from tfattn import masking, position

SEGMENTS = np.array([[1, 1, 1, 2, 2, 0], [1, 2, 2, 2, 3, 3]], np.int32)


def _numpy_positions(segments):
  out = np.zeros_like(segments)
  for row, ids in enumerate(segments):
    for i in range(1, len(ids)):
      out[row, i] = 0 if ids[i] != ids[i - 1] else out[row, i - 1] + 1
  return out


def test_positions_restart_at_each_segment():
  expected = _numpy_positions(SEGMENTS)
  np.testing.assert_array_equal(position.segment_positions(SEGMENTS).numpy(), expected)
  compiled = tf.function(position.segment_positions, jit_compile=True, autograph=False)
  np.testing.assert_array_equal(compiled(tf.constant(SEGMENTS)).numpy(), expected)


def test_a_query_sees_only_keys_of_its_own_segment():
  bias = masking.segment_bias(SEGMENTS, SEGMENTS).numpy()
  assert bias.shape == (2, 1, 6, 6)
  allowed = bias[:, 0] == 0
  expected = (SEGMENTS[:, :, None] == SEGMENTS[:, None, :]) & (SEGMENTS[:, None, :] > 0)
  np.testing.assert_array_equal(allowed, expected)
  assert (bias[~expected[:, None]] <= masking.large_negative(tf.float32)).all()


def test_segment_bias_keeps_the_dtype_masking_value():
  bias = masking.segment_bias(SEGMENTS, SEGMENTS, tf.float16)
  assert bias.dtype == tf.float16
  assert float(tf.reduce_min(bias)) == masking.large_negative(tf.float16)
