"""Analytic matmul FLOPs of a forward pass (2 per multiply-add); training is 3x forward (the
backward pass computes two matmuls per forward one). Padded lengths are counted: the device
does that work. Elementwise ops, softmax and layer norm are left out, as in MFU reports."""

from tfattn.config import TransformerConfig


def self_attention_pairs(length: int, window=None, causal: bool = False) -> int:
  """Query-key products one head of a self-attention computes: length^2 for full attention;
  with a window, the padded blocks times their neighbours' keys (`tfattn.local_attention`)."""
  if window is None or length == 0:
    return length * length
  block = min(window, length)
  blocks = -(-length // block)
  return blocks * block * (2 if causal else 3) * block


def _encoder_layer(d, dff, s, pairs=None):
  """Self-attention (fused q/k/v, q k^T, weights x v, output) and the feed-forward, per example;
  `pairs`: the attention's query-key products (default s * s)."""
  pairs = s * s if pairs is None else pairs
  return 8 * s * d * d + 4 * pairs * d + 4 * s * d * dff


def _decoder_layer(d, dff, s, t, window=None):
  """Masked self-attention, cross-attention (keys and values from the s source positions) and
  the feed-forward, per example."""
  self_attention = 8 * t * d * d + 4 * self_attention_pairs(t, window, causal=True) * d
  cross_attention = 4 * t * d * d + 4 * s * d * d + 4 * t * s * d
  return self_attention + cross_attention + 4 * t * d * dff


def seq2seq_forward_flops(
  config: TransformerConfig, batch: int, source_length: int, target_length: int
) -> int:
  """`Transformer(source [batch, source_length], target [batch, target_length])` -> logits."""
  d, dff, s, t = config.d_model, config.dff, source_length, target_length
  per_example = (
    config.num_encoder_layers
    * _encoder_layer(d, dff, s, self_attention_pairs(s, config.attention_window))
    + config.num_decoder_layers * _decoder_layer(d, dff, s, t, config.attention_window)
    + 2 * t * d * config.target_vocab_size
  )
  return batch * per_example


def classifier_forward_flops(config: TransformerConfig, batch: int, length: int) -> int:
  """`EncoderClassifier(ids [batch, length])` -> logits."""
  d, s = config.d_model, length
  pairs = self_attention_pairs(s, config.attention_window)
  if config.classifier_body == "attention":
    body = 8 * s * d * d + 4 * pairs * d
  else:
    body = config.num_encoder_layers * _encoder_layer(d, config.dff, s, pairs)
  return batch * (body + 2 * d * config.num_classes)


def language_model_forward_flops(config: TransformerConfig, batch: int, length: int) -> int:
  """`LanguageModel(ids [batch, length])` -> logits: causal layers (counted as full
  self-attention, as the device computes them; windowed: the blocks it computes) and the tied
  output projection."""
  d, t = config.d_model, length
  pairs = self_attention_pairs(t, config.attention_window, causal=True)
  per_example = config.num_decoder_layers * _encoder_layer(d, config.dff, t, pairs)
  return batch * (per_example + 2 * t * d * config.target_vocab_size)


def training_flops(forward_flops: float) -> float:
  return 3 * forward_flops
