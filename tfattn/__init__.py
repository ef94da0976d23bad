"""tfattn: the Transformer in low-level TensorFlow 2 (`tf.Module`s, no Keras layers).

`tfattn.Transformer`, `from tfattn import Encoder`, ... work as usual; each name's module is
imported when the name is first used (PEP 562), so the modules that need no TensorFlow
(`tfattn.config`, `tfattn.decode_options`, `tfattn.kinds`) import without
it: a program can parse and check its flags before TensorFlow's ~3 s import.
"""

import importlib
from typing import TYPE_CHECKING

# {public name: the module that defines it}
_EXPORTS = {
  "PRESETS": "tfattn.config",
  "TransformerConfig": "tfattn.config",
  "CrossAttention": "tfattn.attention",
  "SelfAttention": "tfattn.attention",
  "scaled_dot_product_attention": "tfattn.attention",
  "LanguageModel": "tfattn.language_model",
  "Embedding": "tfattn.layers",
  "FeedForward": "tfattn.layers",
  "LayerNorm": "tfattn.layers",
  "Linear": "tfattn.layers",
  "LearnedPosition": "tfattn.position",
  "SinusoidalPosition": "tfattn.position",
  "sinusoidal_encoding": "tfattn.position",
  "Decoder": "tfattn.transformer",
  "DecoderLayer": "tfattn.transformer",
  "Encoder": "tfattn.transformer",
  "EncoderClassifier": "tfattn.transformer",
  "EncoderLayer": "tfattn.transformer",
  "Transformer": "tfattn.transformer",
}

__all__ = sorted([*_EXPORTS, "masking"])


def __getattr__(name):
  if name in _EXPORTS:
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value  # found once
    return value
  if name == "masking":
    return importlib.import_module("tfattn.masking")
  raise AttributeError(f"module 'tfattn' has no attribute {name!r}")


def __dir__():
  return sorted({*globals(), *__all__})


if TYPE_CHECKING:  # what editors and type checkers see
  from tfattn import masking  # noqa: F401
  from tfattn.attention import CrossAttention, SelfAttention, scaled_dot_product_attention  # noqa: F401
  from tfattn.config import PRESETS, TransformerConfig  # noqa: F401
  from tfattn.language_model import LanguageModel  # noqa: F401
  from tfattn.layers import Embedding, FeedForward, LayerNorm, Linear  # noqa: F401
  from tfattn.position import LearnedPosition, SinusoidalPosition, sinusoidal_encoding  # noqa: F401
  from tfattn.transformer import (  # noqa: F401
    Decoder,
    DecoderLayer,
    Encoder,
    EncoderClassifier,
    EncoderLayer,
    Transformer,
  )
