"""Serving in reduced precision: a trained model's copy that stores its matmul weights in
bfloat16 or float16 and computes in that dtype, as mixed-precision training computes.

What stays float32, as in mixed-precision training: the layer norms (computed in float32, their
scale and offset float32), the attention softmax (`attention.scaled_dot_product_attention`
computes its logits in float32), the output logits (cast to float32 before any log-softmax), and
everything a search keeps (log-probabilities, scores). What changes: every `Linear` kernel and
bias, the embedding tables and a learned position table are stored in the low dtype, so no step
casts a float32 weight (a model trained with `compute_dtype` set casts every weight at every
use), and a SavedModel holds half the bytes.
"""

import dataclasses
from typing import Callable

import tensorflow as tf

from tfattn import layers, position

SERVING_DTYPES = ("float32", "bfloat16", "float16")


def _low(module: tf.Module, attribute: str, dtype: tf.DType) -> None:
  """Replaces `module.<attribute>` (a float32 variable) by a `dtype` variable of its value."""
  old = getattr(module, attribute)
  if old is None:
    return
  with module.name_scope:
    new = tf.Variable(tf.cast(old, dtype), trainable=old.trainable, name=attribute)
  setattr(module, attribute, new)


def for_serving(model: tf.Module, build: Callable, dtype: str) -> tf.Module:
  """A copy of `model` that computes in `dtype` with its matmul and embedding weights stored in
  it (`dtype` "float32": computing and storing in float32, whatever the model was trained in).

  Args:
    model: a trained model (`Transformer`, `EncoderClassifier`, `LanguageModel`) whose
      `config` says how it was built.
    build: `config -> model` (the kind's `build_model`).
    dtype: one of `SERVING_DTYPES`.
  Returns:
    A new model of the same structure, the same (rounded) weights.
  """
  if dtype not in SERVING_DTYPES:
    raise ValueError(f"serving dtype must be one of {', '.join(SERVING_DTYPES)}, got {dtype!r}")
  copy = build(dataclasses.replace(model.config, compute_dtype=dtype))
  if len(copy.variables) != len(model.variables):
    raise ValueError("the rebuilt model's variables differ from the trained model's")
  for target, source in zip(copy.variables, model.variables):
    target.assign(source)  # the same structure: tf.Module lists variables in attribute order
  if dtype == "float32":
    return copy
  low = tf.as_dtype(dtype)
  for module in copy.submodules:
    if isinstance(module, layers.Linear):
      _low(module, "kernel", low)
      _low(module, "bias", low)
    elif isinstance(module, (layers.Embedding, position.LearnedPosition)):
      _low(module, "table", low)
  return copy
