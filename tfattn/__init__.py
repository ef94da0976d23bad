"""tfattn: the Transformer in low-level TensorFlow 2 (`tf.Module`s, no Keras layers)."""

from tfattn import masking
from tfattn.attention import CrossAttention, SelfAttention, scaled_dot_product_attention
from tfattn.config import PRESETS, TransformerConfig
from tfattn.language_model import LanguageModel
from tfattn.layers import Embedding, FeedForward, LayerNorm, Linear
from tfattn.position import LearnedPosition, SinusoidalPosition, sinusoidal_encoding
from tfattn.transformer import (
  Decoder,
  DecoderLayer,
  Encoder,
  EncoderClassifier,
  EncoderLayer,
  Transformer,
)

__all__ = [
  "PRESETS",
  "CrossAttention",
  "Decoder",
  "DecoderLayer",
  "Embedding",
  "Encoder",
  "EncoderClassifier",
  "EncoderLayer",
  "FeedForward",
  "LanguageModel",
  "LayerNorm",
  "LearnedPosition",
  "Linear",
  "SelfAttention",
  "SinusoidalPosition",
  "Transformer",
  "TransformerConfig",
  "masking",
  "scaled_dot_product_attention",
  "sinusoidal_encoding",
]
