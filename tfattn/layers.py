"""Basic building blocks as plain `tf.Module`s.

Variables are float32 and created in `__init__`; each layer casts them to the dtype of its input,
so a model runs in float16/bfloat16 just by feeding it activations of that dtype.
"""

import math
from typing import List, Optional

import tensorflow as tf


def _glorot_uniform(shape, seed):
  fan_in, fan_out = shape[0], shape[-1]
  limit = math.sqrt(6.0 / (fan_in + fan_out))
  return tf.random.stateless_uniform(shape, seed=seed, minval=-limit, maxval=limit)


def seed_for(base_seed: int, name: str) -> List[int]:
  """A stable per-variable stateless seed, so a model is the same whatever order it is built in."""
  return [base_seed, sum((i + 1) * ord(c) for i, c in enumerate(name)) % (2**31 - 1)]


def _in_xla_context():
  """True while tracing a function XLA compiles (`jit_compile=True`, or inside one)."""
  try:
    from tensorflow.python.ops import control_flow_util  # no public equivalent
  except ImportError:
    return False
  return control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())


def dropout(
  x: tf.Tensor, rate: float, rng: Optional[tf.random.Generator], training: bool
) -> tf.Tensor:
  """Inverted dropout drawing from `rng` (a checkpointed `tf.random.Generator`): each element
  zeroed with probability `rate`, the others scaled by 1 / (1 - rate); `x` itself when not
  training, at rate 0 or without a generator.

  A generator instead of `tf.nn.dropout`'s op seeds makes the masks resume exactly after a
  checkpoint restore, and gives each replica its own stream under `tf.distribute`.
  """
  if not training or rate == 0.0 or rng is None:
    return x
  # One seed from the generator, then a stateless draw. Under XLA the draw uses ThreeFry:
  # XLA's CPU backend expands TensorFlow's default (Philox) into code ~50x slower
  # (benchmarks/dropout_cost.py); TensorFlow's own kernels implement only Philox.
  seed = rng.make_seeds(1)[:, 0]
  alg = "threefry" if _in_xla_context() else "auto_select"
  keep = tf.random.stateless_uniform(tf.shape(x), seed, dtype=tf.float32, alg=alg) >= rate
  # A boolean mask and one select: no float mask tensor, no extra multiply.
  return tf.where(keep, x * tf.cast(1.0 / (1.0 - rate), x.dtype), tf.zeros_like(x))


class Linear(tf.Module):
  """y = x W + b over the last axis: `[..., in_features]` -> `[..., out_features]`.

  Args:
    in_features: size of the input's last axis.
    out_features: size of the output's last axis.
    use_bias: add the bias b (zeros at start).
    seed: base seed; W is Glorot-uniform from a seed derived from it and the module's name.
    name: module name (and variable name scope).
  """

  def __init__(
    self,
    in_features: int,
    out_features: int,
    use_bias: bool = True,
    seed: int = 0,
    name: Optional[str] = None,
  ):
    super().__init__(name=name)
    self.in_features = in_features
    self.out_features = out_features
    with self.name_scope:
      self.kernel = tf.Variable(
        _glorot_uniform([in_features, out_features], seed_for(seed, self.name_scope.name)),
        name="kernel",
      )
      self.bias = tf.Variable(tf.zeros([out_features]), name="bias") if use_bias else None

  def __call__(self, x: tf.Tensor) -> tf.Tensor:
    # One 2-D GEMM on [batch * length, in]: its weight gradient is a single GEMM too, where a
    # broadcasting batched matmul would reduce per-example products (measured slower).
    leading = tf.shape(x)[:-1]
    y = tf.matmul(tf.reshape(x, [-1, self.in_features]), tf.cast(self.kernel, x.dtype))
    if self.bias is not None:
      y = tf.nn.bias_add(y, tf.cast(self.bias, x.dtype))
    return tf.reshape(y, tf.concat([leading, [self.out_features]], axis=0))


# Each embedding initialisation's table stddev (None: d_model^-0.5).
EMBEDDING_STDDEVS = {"paper": None, "gpt2": 0.02}


class Embedding(tf.Module):
  """Token embedding scaled by sqrt(d_model) (paper section 3.4), or GPT-2's small unscaled one.

  `logits()` reuses the same table as the pre-softmax projection when weights are shared.

  Args:
    vocab_size: rows of the table (token ids 0..vocab_size-1).
    d_model: width of each embedding.
    seed: base seed of the table's initialisation.
    name: module name.
    init: "paper": normal(0, d_model^-0.5), lookups times sqrt(d_model) (unit variance);
      "gpt2": normal(0, 0.02), lookups as they are (GPT-2, nanoGPT). As the tied output, the
      paper's rows have norm ~1 and a state still carrying its own token's lookup (norm
      ~sqrt(d_model)) gives that token a logit of order sqrt(d_model): a language model's first
      loss lies far above ln(vocab). GPT-2's start near 0, and Adam's steps of ~learning_rate
      move them quickly (a T5-style d_model^-0.5 scale on the tied output also starts at
      ln(vocab) but learns slowly: WORKSPACE_NOTES, issue 41).
  """

  def __init__(
    self,
    vocab_size: int,
    d_model: int,
    seed: int = 0,
    name: Optional[str] = None,
    init: str = "paper",
  ):
    super().__init__(name=name)
    if init not in EMBEDDING_STDDEVS:
      raise ValueError(f"init must be one of {sorted(EMBEDDING_STDDEVS)}, got {init!r}")
    self.vocab_size = vocab_size
    self.d_model = d_model
    self.scales_inputs = init == "paper"
    with self.name_scope:
      # The paper's stddev d_model^-0.5: after the sqrt(d_model) scale, unit variance.
      table = tf.random.stateless_normal(
        [vocab_size, d_model],
        seed=seed_for(seed, self.name_scope.name),
        stddev=EMBEDDING_STDDEVS[init] or d_model**-0.5,
      )
      self.table = tf.Variable(table, name="table")

  def __call__(self, ids: tf.Tensor, dtype: tf.DType = tf.float32) -> tf.Tensor:
    """ids: int `[batch, length]` -> `[batch, length, d_model]` in `dtype`."""
    vectors = tf.cast(tf.gather(self.table, ids), dtype)
    if not self.scales_inputs:
      return vectors
    return vectors * tf.cast(math.sqrt(self.d_model), dtype)

  def logits(self, x: tf.Tensor) -> tf.Tensor:
    """x: `[batch, length, d_model]` -> `[batch, length, vocab_size]`."""
    leading = tf.shape(x)[:-1]
    flat = tf.matmul(
      tf.reshape(x, [-1, self.d_model]), tf.cast(self.table, x.dtype), transpose_b=True
    )
    return tf.reshape(flat, tf.concat([leading, [self.vocab_size]], axis=0))


class LayerNorm(tf.Module):
  """Layer normalisation over the last axis, computed in float32 for stability:
  `[..., size]` -> `[..., size]` in the input's dtype.

  Args:
    size: the last axis' size (of the learned scale and offset).
    epsilon: added to the variance before the square root.
    name: module name.
  """

  def __init__(self, size: int, epsilon: float = 1e-6, name: Optional[str] = None):
    super().__init__(name=name)
    self.epsilon = epsilon
    with self.name_scope:
      self.scale = tf.Variable(tf.ones([size]), name="scale")
      self.offset = tf.Variable(tf.zeros([size]), name="offset")

  def __call__(self, x: tf.Tensor) -> tf.Tensor:
    # On rows [-1, size]: the scale's and offset's gradients are then sums over one axis,
    # which XLA's CPU backend reduces faster than over several.
    rows = tf.reshape(tf.cast(x, tf.float32), [-1, tf.shape(x)[-1]])
    normed = _layer_norm(rows, self.scale, self.offset, self.epsilon)
    return tf.cast(tf.reshape(normed, tf.shape(x)), x.dtype)


def _layer_norm(x: tf.Tensor, scale, offset, epsilon: float) -> tf.Tensor:
  """(x - mean) / sqrt(variance + epsilon) * scale + offset over each row of float32 x
  `[rows, size]`, with its backward pass in closed form."""

  @tf.custom_gradient
  def layer_norm(x, scale, offset):
    mean = tf.reduce_mean(x, axis=-1, keepdims=True)
    centred = x - mean
    variance = tf.reduce_mean(tf.square(centred), axis=-1, keepdims=True)
    inverse_std = tf.math.rsqrt(variance + epsilon)
    normed = centred * inverse_std

    def gradient(dy):
      # With g = dy * scale: dx = (g - mean(g) - normed * mean(g * normed)) / std. The same
      # values as autodiff through the mean and the variance, in fewer passes over x: XLA's
      # CPU step of a small language model ran ~4% faster (WORKSPACE_NOTES, issue 41).
      g = dy * scale
      dx = inverse_std * (
        g
        - tf.reduce_mean(g, axis=-1, keepdims=True)
        - normed * tf.reduce_mean(g * normed, axis=-1, keepdims=True)
      )
      return dx, tf.reduce_sum(dy * normed, axis=0), tf.reduce_sum(dy, axis=0)

    return normed * scale + offset, gradient

  return layer_norm(x, scale, offset)


ACTIVATIONS = {
  "relu": tf.nn.relu,  # max(0, x): the paper's eq. 2
  # x * Phi(x) with the exact normal CDF (erf), as GPT-2's successors and nanoGPT (nn.GELU()).
  "gelu": lambda x: tf.nn.gelu(x, approximate=False),
  # 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))): GPT-2's original form, keras-hub's.
  "gelu_tanh": lambda x: tf.nn.gelu(x, approximate=True),
  # x * sigmoid(x), SiLU: Marian's "swish" (transformers' ACT2FN["swish"] is nn.SiLU).
  "swish": tf.nn.silu,
}


class FeedForward(tf.Module):
  """FFN(x) = max(0, x W1 + b1) W2 + b2 (paper eq. 2), or GELU / swish (x W1 + b1) W2 + b2:
  `[..., d_model]` -> `[..., d_model]`.

  Args:
    d_model: input and output width.
    dff: inner (hidden) width.
    activation: the hidden layer's nonlinearity, a key of `ACTIVATIONS`: "relu", "gelu",
      "gelu_tanh", "swish".
    dropout_rate: dropout on the hidden layer while training (tensor2tensor's relu_dropout; the
      paper has none, and `TransformerConfig.feed_forward_dropout_rate` defaults to 0).
    rng: the model's `tf.random.Generator` for dropout (needed when dropout_rate > 0).
    seed: base seed of the two Linear layers.
    name: module name.
  """

  def __init__(
    self,
    d_model: int,
    dff: int,
    dropout_rate: float = 0.0,
    rng: Optional[tf.random.Generator] = None,
    seed: int = 0,
    name: Optional[str] = None,
    activation: str = "relu",
  ):
    super().__init__(name=name)
    if activation not in ACTIVATIONS:
      raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
    self.activation = ACTIVATIONS[activation]
    self.dropout_rate = dropout_rate
    self._rng = rng
    with self.name_scope:
      self.inner = Linear(d_model, dff, seed=seed, name="inner")
      self.outer = Linear(dff, d_model, seed=seed, name="outer")

  def __call__(self, x: tf.Tensor, training: bool = False) -> tf.Tensor:
    hidden = self.activation(self.inner(x))
    hidden = dropout(hidden, self.dropout_rate, self._rng, training)
    return self.outer(hidden)
