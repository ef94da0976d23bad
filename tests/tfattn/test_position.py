"""tfattn.position: the paper's sinusoids (section 3.5) and the learned table."""

import numpy as np
import pytest
import tensorflow as tf

from tfattn import position


def _paper(length, d_model):
  """PE(pos, 2i) = sin(pos / 10000^(2i / d_model)), PE(pos, 2i + 1) = cos(same angle)."""
  table = np.zeros([length, d_model])
  for pos in range(length):
    for dim in range(d_model):
      angle = pos / 10000 ** ((dim - dim % 2) / d_model)
      table[pos, dim] = np.sin(angle) if dim % 2 == 0 else np.cos(angle)
  return table


@pytest.mark.parametrize("d_model", [8, 7])
def test_sinusoids_follow_the_papers_formula(d_model):
  got = position.sinusoidal_encoding(tf.range(50), d_model).numpy()
  np.testing.assert_allclose(got, _paper(50, d_model), atol=2e-5)


def _marian(length, d_model):
  """transformers' MarianSinusoidalPositionalEmbedding.create_weight, in numpy: every sine, then
  every cosine (sentinel = ceil(d/2) sines), angles in float64."""
  position_enc = np.array(
    [
      [pos / np.power(10000, 2 * (j // 2) / d_model) for j in range(d_model)]
      for pos in range(length)
    ]
  )
  sentinel = d_model // 2 if d_model % 2 == 0 else d_model // 2 + 1
  out = np.empty([length, d_model], np.float32)
  out[:, :sentinel] = np.sin(position_enc[:, 0::2])
  out[:, sentinel:] = np.cos(position_enc[:, 1::2])
  return out


@pytest.mark.parametrize("d_model", [8, 7, 512])
def test_halves_layout_is_marians_sin_then_cos(d_model):
  got = position.sinusoidal_encoding(tf.range(600), d_model, "halves").numpy()
  np.testing.assert_allclose(got, _marian(600, d_model), atol=1e-6, rtol=0)
  add = position.SinusoidalPosition(d_model, layout="halves")
  np.testing.assert_allclose(
    add(tf.zeros([1, 3, d_model]), offset=5).numpy()[0], _marian(8, d_model)[5:], atol=1e-6
  )
  np.testing.assert_allclose(
    add.at(tf.constant([[4, 2]]), limit=6).numpy()[0], _marian(6, d_model)[[4, 2]], atol=1e-6
  )
  with pytest.raises(ValueError, match="layout must be one of"):
    position.SinusoidalPosition(8, layout="rotary")


def test_sinusoidal_position_adds_the_encoding_from_an_offset():
  add = position.SinusoidalPosition(6)
  x = tf.zeros([2, 3, 6])
  np.testing.assert_allclose(add(x, offset=4).numpy()[0], _paper(7, 6)[4:], atol=2e-5)
  assert add(tf.zeros([1, 2, 6], tf.bfloat16)).dtype == tf.bfloat16
  assert not add.trainable_variables  # fixed: nothing to learn


def test_learned_position_adds_its_table_rows():
  add = position.LearnedPosition(10, 4, seed=1)
  x = tf.ones([2, 3, 4])
  np.testing.assert_allclose(add(x, offset=2).numpy()[1], 1 + add.table.numpy()[2:5], rtol=1e-6)
  assert [v.shape for v in add.trainable_variables] == [(10, 4)]
