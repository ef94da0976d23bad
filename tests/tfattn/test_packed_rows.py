"""Packed rows (several pairs a row, with segment ids): each pair's logits and losses are those
of the pair alone in its own row."""

import numpy as np
import pytest
import tensorflow as tf

import tfattn
from tfattn import losses

# Three (source, target) pairs of different lengths, ids >= 3 (no PAD, START or END inside).
PAIRS = [([5, 6, 7, 8, 9], [11, 12, 13]), ([14, 15], [16, 17, 18, 19, 20]), ([21, 22, 23], [24])]
START, END = 1, 2


def _separate_rows():
  """Each pair in its own row, padded: source, target_in, target_out `[3, length]`."""
  s_len = max(len(s) for s, _ in PAIRS)
  t_len = max(len(t) for _, t in PAIRS) + 1
  rows = [[], [], []]
  for source, target in PAIRS:
    rows[0].append(source + [0] * (s_len - len(source)))
    rows[1].append([START] + target + [0] * (t_len - len(target) - 1))
    rows[2].append(target + [END] + [0] * (t_len - len(target) - 1))
  return [tf.constant(r, tf.int32) for r in rows]


def _packed_row(padding=2):
  """All three pairs in one row (then `padding` pad tokens a side), with their segments."""
  source, source_segments, target_in, target_out, target_segments = [], [], [], [], []
  for k, (s, t) in enumerate(PAIRS, 1):
    source += s
    source_segments += [k] * len(s)
    target_in += [START, *t]
    target_out += [*t, END]
    target_segments += [k] * (len(t) + 1)
  rows = [source, source_segments, target_in, target_out, target_segments]
  return [tf.constant([row + [0] * padding], tf.int32) for row in rows]


def _token_losses(logits, target_out):
  token_losses, _ = losses.label_smoothed_cross_entropy(logits, target_out, 0.1)
  return token_losses.numpy()


@pytest.mark.parametrize(
  "norm_position,position_encoding", [("post", "sinusoidal"), ("pre", "learned")]
)
def test_a_packed_row_gives_each_pair_the_losses_of_its_own_row(
  tiny_config, norm_position, position_encoding
):
  config = tiny_config.replace(norm_position=norm_position, position_encoding=position_encoding)
  model = tfattn.Transformer(config)
  source, target_in, target_out = _separate_rows()
  separate = _token_losses(model(source, target_in), target_out)  # [3, t_len]
  p_source, p_source_segments, p_target_in, p_target_out, p_target_segments = _packed_row()
  logits = model(
    p_source, p_target_in, source_segments=p_source_segments, target_segments=p_target_segments
  )
  packed = _token_losses(logits, p_target_out)[0]  # [packed t_len]
  start = 0
  for row, (_, target) in enumerate(PAIRS):
    length = len(target) + 1
    np.testing.assert_allclose(packed[start : start + length], separate[row, :length], atol=1e-5)
    start += length
  assert (packed[start:] == 0).all()  # padding counts for nothing
  # Without the segments, the pairs would see each other: the test can tell.
  unsegmented = _token_losses(model(p_source, p_target_in), p_target_out)[0]
  assert np.abs(unsegmented - packed).max() > 1e-3


@pytest.mark.slow  # XLA compiles
def test_packed_rows_compile_with_xla_and_match_graph_mode(tiny_model):
  source, source_segments, target_in, _, target_segments = _packed_row()
  spec = tf.TensorSpec([None, None], tf.int32)

  def forward(s, s_seg, t, t_seg):
    return tiny_model(s, t, source_segments=s_seg, target_segments=t_seg)

  graph = tf.function(forward, input_signature=[spec] * 4, autograph=False)
  xla = tf.function(forward, input_signature=[spec] * 4, jit_compile=True, autograph=False)
  arguments = (source, source_segments, target_in, target_segments)
  np.testing.assert_allclose(xla(*arguments), graph(*arguments), atol=1e-4)


def test_segments_come_in_pairs_and_need_full_attention(tiny_config):
  source, source_segments, target_in, _, target_segments = _packed_row()
  with pytest.raises(ValueError, match="both source_segments and target_segments"):
    tfattn.Transformer(tiny_config)(source, target_in, source_segments=source_segments)
  windowed = tfattn.Transformer(tiny_config.replace(attention_window=4))
  with pytest.raises(ValueError, match="full attention"):
    windowed(source, target_in, source_segments=source_segments, target_segments=target_segments)
