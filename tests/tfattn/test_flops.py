"""The analytic FLOPs formulas against the matmuls of the model's own traced graph."""

import pytest
import tensorflow as tf

import tfattn
from tfattn import flops


def _graph_matmul_flops(function, *specs):
  """2 * M * K * N summed over every MatMul / BatchMatMul in the traced forward graph."""
  graph = function.get_concrete_function(*specs).graph
  total = 0
  for op in graph.get_operations():
    if op.type == "MatMul":
      a, b = (x.shape.as_list() for x in op.inputs)
      m, k = (a[1], a[0]) if op.get_attr("transpose_a") else a
      n = b[0] if op.get_attr("transpose_b") else b[1]
      total += 2 * m * k * n
    elif op.type.startswith("BatchMatMul"):
      a, b = (x.shape.as_list() for x in op.inputs)
      adj_x, adj_y = op.get_attr("adj_x"), op.get_attr("adj_y")
      m, k = (a[-1], a[-2]) if adj_x else (a[-2], a[-1])
      n = b[-2] if adj_y else b[-1]
      batch = 1
      for size in a[:-2]:
        batch *= size
      total += 2 * batch * m * k * n
  return total


def _config(**overrides):
  values = dict(
    source_vocab_size=97,
    target_vocab_size=89,
    d_model=32,
    num_heads=4,
    dff=48,
    num_encoder_layers=2,
    num_decoder_layers=3,
    max_length=64,
    num_classes=3,
  )
  values.update(overrides)
  return tfattn.TransformerConfig.preset("tiny", **values)


@pytest.mark.slow
@pytest.mark.parametrize("window", [None, 3])
def test_seq2seq_formula_counts_every_matmul_of_the_graph(window):
  config = _config(attention_window=window)
  model = tfattn.Transformer(config)
  batch, source_length, target_length = 3, 11, 7
  counted = _graph_matmul_flops(
    tf.function(lambda s, t: model(s, t), autograph=False),
    tf.TensorSpec([batch, source_length], tf.int32),
    tf.TensorSpec([batch, target_length], tf.int32),
  )
  assert flops.seq2seq_forward_flops(config, batch, source_length, target_length) == counted


@pytest.mark.parametrize(
  "body, window", [("transformer", None), ("attention", None), ("transformer", 4)]
)
def test_classifier_formula_counts_every_matmul_of_the_graph(body, window):
  config = _config(classifier_body=body, attention_window=window)
  model = tfattn.EncoderClassifier(config)
  counted = _graph_matmul_flops(
    tf.function(lambda ids: model(ids), autograph=False), tf.TensorSpec([5, 13], tf.int32)
  )
  assert flops.classifier_forward_flops(config, 5, 13) == counted


@pytest.mark.parametrize("window", [None, 4])
def test_language_model_formula_counts_every_matmul_of_the_graph(window):
  from tfattn.language_model import LanguageModel

  config = _config(attention_window=window, target_vocab_size=97)
  model = LanguageModel(config)
  counted = _graph_matmul_flops(
    tf.function(lambda ids: model(ids), autograph=False), tf.TensorSpec([2, 10], tf.int32)
  )
  assert flops.language_model_forward_flops(config, 2, 10) == counted
