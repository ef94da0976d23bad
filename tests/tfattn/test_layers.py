"""tfattn.layers: dropout in graph mode and under XLA."""

import math

import numpy as np
import pytest
import tensorflow as tf

from tfattn import layers


@pytest.mark.parametrize("jit_compile", [False, True])
def test_dropout_drops_the_rate_and_rescales_the_rest(jit_compile):
  rng = tf.random.Generator.from_seed(3)
  x = tf.ones([256, 512])
  drop = tf.function(
    lambda: layers.dropout(x, 0.25, rng, training=True), jit_compile=jit_compile, autograph=False
  )
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


@pytest.mark.parametrize("rate", [0.0, 0.5])
def test_feed_forward_drops_its_hidden_layer_only_when_asked(rate):
  """The paper drops sublayer outputs only; tensor2tensor also drops the ReLU layer."""
  rng = tf.random.Generator.from_seed(3)
  ffn = layers.FeedForward(16, 64, dropout_rate=rate, rng=rng, seed=1)
  x = tf.random.stateless_normal([4, 7, 16], [1, 2])
  trained, inferred = ffn(x, training=True), ffn(x, training=False)
  assert trained.shape == x.shape
  if rate:
    assert not np.allclose(trained, inferred)
  else:
    np.testing.assert_array_equal(trained.numpy(), inferred.numpy())


def test_transformer_feed_forward_dropout_follows_its_own_rate():
  import tfattn

  paper = tfattn.TransformerConfig.preset("tiny", dropout_rate=0.1)
  t2t = tfattn.TransformerConfig.preset("tiny", dropout_rate=0.1, feed_forward_dropout_rate=0.1)
  for config, expected in ((paper, 0.0), (t2t, 0.1)):
    layer = tfattn.Transformer(config).encoder.layers[0]
    assert layer.feed_forward.dropout_rate == expected
    assert layer.dropout_rate == 0.1
  with pytest.raises(ValueError, match="feed_forward_dropout_rate"):
    tfattn.TransformerConfig(feed_forward_dropout_rate=1.0)


# Each layer against a numpy reference in float64, eager and under tf.function with
# unknown shapes (the graph-first contract).
def _in_graph(fn, spec):
  return tf.function(fn, input_signature=[spec], autograph=False)


@pytest.mark.parametrize("graph", [False, True])
def test_linear_is_x_w_plus_b_over_the_last_axis(graph):
  linear = layers.Linear(5, 3, seed=2)
  linear.bias.assign([0.1, -0.2, 0.3])
  x = np.random.default_rng(0).normal(size=[2, 4, 5]).astype(np.float32)
  call = _in_graph(linear, tf.TensorSpec([None, None, 5])) if graph else linear
  expected = x.astype(np.float64) @ linear.kernel.numpy() + linear.bias.numpy()
  np.testing.assert_allclose(call(x).numpy(), expected, rtol=1e-5, atol=1e-6)
  assert layers.Linear(5, 3, use_bias=False, seed=2).bias is None
  # Glorot-uniform: every weight within sqrt(6 / (fan_in + fan_out)).
  assert np.abs(linear.kernel.numpy()).max() <= np.sqrt(6 / 8)


@pytest.mark.parametrize("graph", [False, True])
def test_embedding_scales_by_sqrt_d_model_and_ties_the_output_projection(graph):
  embedding = layers.Embedding(11, 8, seed=1)
  table = embedding.table.numpy().astype(np.float64)
  ids = np.array([[1, 4, 10], [0, 0, 3]], np.int32)
  call = _in_graph(embedding, tf.TensorSpec([None, None], tf.int32)) if graph else embedding
  np.testing.assert_allclose(call(ids).numpy(), table[ids] * np.sqrt(8), rtol=1e-6)
  x = np.random.default_rng(1).normal(size=[2, 3, 8]).astype(np.float32)
  np.testing.assert_allclose(embedding.logits(x).numpy(), x @ table.T, rtol=1e-5, atol=1e-6)
  assert embedding(ids, dtype=tf.bfloat16).dtype == tf.bfloat16


def test_layer_norm_normalises_the_last_axis():
  norm = layers.LayerNorm(6, epsilon=1e-6)
  norm.scale.assign(np.linspace(0.5, 1.5, 6))
  norm.offset.assign(np.linspace(-1, 1, 6))
  x = np.random.default_rng(2).normal(3.0, 2.0, size=[2, 3, 6])
  mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
  expected = (x - mean) / np.sqrt(var + 1e-6) * norm.scale.numpy() + norm.offset.numpy()
  out = norm(tf.cast(x, tf.float32))
  assert out.dtype == tf.float32
  np.testing.assert_allclose(out.numpy(), expected, atol=1e-5)


@pytest.mark.parametrize("jit_compile", [False, True])
def test_layer_norm_gradients_are_autodiffs_of_the_formula(jit_compile):
  """The closed-form backward pass against autodiff through the textbook formula in float64,
  for the input (rank 3) and both variables."""
  norm = layers.LayerNorm(6, epsilon=1e-6)
  norm.scale.assign(np.linspace(0.5, 1.5, 6))
  norm.offset.assign(np.linspace(-1, 1, 6))
  rng = np.random.default_rng(4)
  x = tf.constant(rng.normal(3.0, 2.0, size=[2, 3, 6]), tf.float32)
  weights = tf.constant(rng.normal(size=[2, 3, 6]), tf.float32)

  def ours(x):
    with tf.GradientTape() as tape:
      tape.watch(x)
      loss = tf.reduce_sum(norm(x) * weights)
    return tape.gradient(loss, [x, norm.scale, norm.offset])

  x64, scale, offset = (tf.cast(t, tf.float64) for t in (x, norm.scale, norm.offset))
  with tf.GradientTape() as tape:
    tape.watch([x64, scale, offset])
    mean, variance = tf.nn.moments(x64, axes=[-1], keepdims=True)
    formula = (x64 - mean) / tf.sqrt(variance + 1e-6) * scale + offset
    loss = tf.reduce_sum(formula * tf.cast(weights, tf.float64))
  expected = tape.gradient(loss, [x64, scale, offset])
  got = tf.function(ours, jit_compile=jit_compile, autograph=False)(x)
  for g, e in zip(got, expected):
    assert g.shape == e.shape
    np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-4, atol=1e-5)


def test_layer_norm_of_bfloat16_is_computed_in_float32():
  """The reference is float32 layer norm of the same bfloat16-rounded inputs. Computing in
  float32 and rounding once at the end stays within half a bfloat16 step (ulp) of it (measured:
  0.49 ulp, 0.0064 absolute); the whole norm in bfloat16 errs by 31 ulp (0.025 absolute)."""
  norm = layers.LayerNorm(6, epsilon=1e-6)
  norm.scale.assign(np.linspace(0.5, 1.5, 6))
  norm.offset.assign(np.linspace(-1, 1, 6))
  x = tf.cast(np.random.default_rng(2).normal(3.0, 2.0, size=[2, 3, 6]), tf.bfloat16)
  reference = norm(tf.cast(x, tf.float32)).numpy().astype(np.float64)
  out = norm(x)
  assert out.dtype == tf.bfloat16
  ulp = 2.0 ** (np.floor(np.log2(np.abs(reference))) - 7)  # bfloat16: 8 significant bits
  error_in_ulps = np.abs(tf.cast(out, tf.float64).numpy() - reference) / ulp
  assert error_in_ulps.max() <= 1.0, error_in_ulps.max()


def test_feed_forward_is_the_papers_equation_2():
  ffn = layers.FeedForward(4, 16, seed=3)
  x = np.random.default_rng(3).normal(size=[2, 5, 4])
  w1, b1 = ffn.inner.kernel.numpy(), ffn.inner.bias.numpy()
  w2, b2 = ffn.outer.kernel.numpy(), ffn.outer.bias.numpy()
  expected = np.maximum(0, x @ w1 + b1) @ w2 + b2
  np.testing.assert_allclose(ffn(tf.constant(x, tf.float32)).numpy(), expected, atol=1e-5)


@pytest.mark.parametrize("graph", [False, True])
def test_feed_forward_gelu_is_x_times_the_normal_cdf(graph):
  """GELU(x) = x * Phi(x) with the exact (erf) normal CDF, as nanoGPT's nn.GELU()."""
  ffn = layers.FeedForward(4, 16, seed=3, activation="gelu")
  x = np.random.default_rng(3).normal(size=[2, 5, 4])
  w1, b1 = ffn.inner.kernel.numpy(), ffn.inner.bias.numpy()
  w2, b2 = ffn.outer.kernel.numpy(), ffn.outer.bias.numpy()
  hidden = x @ w1 + b1
  phi = 0.5 * (1.0 + np.vectorize(math.erf)(hidden / math.sqrt(2.0)))
  expected = (hidden * phi) @ w2 + b2
  call = _in_graph(ffn, tf.TensorSpec([None, None, 4])) if graph else ffn
  np.testing.assert_allclose(call(tf.constant(x, tf.float32)).numpy(), expected, atol=1e-5)
  with pytest.raises(ValueError, match="activation must be one of"):
    layers.FeedForward(4, 16, activation="mish")


@pytest.mark.parametrize("graph", [False, True])
def test_feed_forward_gelu_tanh_is_gpt2s_approximation(graph):
  """GELU's tanh form, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), as GPT-2 and keras-hub."""
  ffn = layers.FeedForward(4, 16, seed=3, activation="gelu_tanh")
  x = np.random.default_rng(4).normal(size=[2, 5, 4]) * 3
  w1, b1 = ffn.inner.kernel.numpy(), ffn.inner.bias.numpy()
  w2, b2 = ffn.outer.kernel.numpy(), ffn.outer.bias.numpy()
  hidden = x @ w1 + b1
  gelu = 0.5 * hidden * (1 + np.tanh(math.sqrt(2 / math.pi) * (hidden + 0.044715 * hidden**3)))
  call = _in_graph(ffn, tf.TensorSpec([None, None, 4])) if graph else ffn
  np.testing.assert_allclose(call(tf.constant(x, tf.float32)).numpy(), gelu @ w2 + b2, atol=1e-5)


@pytest.mark.parametrize("graph", [False, True])
def test_feed_forward_swish_is_x_times_its_sigmoid(graph):
  """swish(x) = x * sigmoid(x) (SiLU), Marian's activation_function "swish"."""
  ffn = layers.FeedForward(4, 16, seed=3, activation="swish")
  x = np.random.default_rng(5).normal(size=[2, 5, 4]) * 3
  w1, b1 = ffn.inner.kernel.numpy(), ffn.inner.bias.numpy()
  w2, b2 = ffn.outer.kernel.numpy(), ffn.outer.bias.numpy()
  hidden = x @ w1 + b1
  swish = hidden / (1 + np.exp(-hidden))
  call = _in_graph(ffn, tf.TensorSpec([None, None, 4])) if graph else ffn
  np.testing.assert_allclose(call(tf.constant(x, tf.float32)).numpy(), swish @ w2 + b2, atol=1e-5)


def test_the_activation_setting_reaches_every_feed_forward():
  import tfattn

  for activation, function in layers.ACTIVATIONS.items():
    config = tfattn.TransformerConfig.preset("tiny", activation=activation)
    model = tfattn.Transformer(config)
    for layer in (*model.encoder.layers, *model.decoder.layers):
      assert layer.feed_forward.activation is function
  # A configuration saved before the setting: the paper's ReLU.
  assert tfattn.TransformerConfig.from_saved({}).activation == "relu"


@pytest.mark.parametrize("graph", [False, True])
def test_gpt2_embeddings_are_small_and_unscaled(graph):
  embedding = layers.Embedding(500, 64, seed=1, init="gpt2")
  table = embedding.table.numpy().astype(np.float64)
  assert table.std() == pytest.approx(0.02, rel=0.05)
  ids = np.array([[1, 4, 10], [0, 0, 3]], np.int32)
  call = _in_graph(embedding, tf.TensorSpec([None, None], tf.int32)) if graph else embedding
  np.testing.assert_allclose(call(ids).numpy(), table[ids], rtol=1e-6)  # no sqrt(d_model)
  x = np.random.default_rng(1).normal(size=[2, 3, 64]).astype(np.float32)
  np.testing.assert_allclose(embedding.logits(x).numpy(), x @ table.T, rtol=1e-4, atol=1e-5)
  with pytest.raises(ValueError, match="init must be one of"):
    layers.Embedding(5, 4, init="xavier")


@pytest.mark.parametrize("norm_position", ["post", "pre"])
def test_gpt2_embeddings_start_a_language_model_at_ln_vocab(norm_position):
  """A language model that knows nothing should guess uniformly: its first loss ln(vocab). With
  the paper's embeddings as the tied output its state still carries the input token's lookup,
  whose own logit is of order sqrt(d_model): the first loss lies far above (measured 4.7-7.5
  nats against ln 68 = 4.22 at 4 layers, width 128: WORKSPACE_NOTES, issue 41)."""
  import tfattn

  vocab, rng = 68, np.random.default_rng(0)
  ids = tf.constant(rng.integers(3, vocab, size=[16, 33]), tf.int32)
  losses = {}
  for init in ("paper", "gpt2"):
    config = tfattn.TransformerConfig(
      source_vocab_size=vocab,
      target_vocab_size=vocab,
      d_model=128,
      num_heads=4,
      dff=256,
      num_encoder_layers=0,
      num_decoder_layers=2,
      dropout_rate=0.0,
      max_length=64,
      norm_position=norm_position,
      position_encoding="learned",
      embedding_init=init,
    )
    logits = tfattn.LanguageModel(config)(ids[:, :-1])
    losses[init] = float(
      tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(ids[:, 1:], logits))
    )
  assert abs(losses["gpt2"] - np.log(vocab)) < 0.3, losses
  assert losses["paper"] > np.log(vocab) + 0.3, losses


def test_the_embedding_init_reaches_every_model():
  import tfattn

  config = tfattn.TransformerConfig.preset("tiny", embedding_init="gpt2")
  for model in (
    tfattn.Transformer(config),
    tfattn.EncoderClassifier(config),
    tfattn.LanguageModel(config),
  ):
    embeddings = [m for m in model.submodules if isinstance(m, layers.Embedding)]
    assert embeddings and not any(m.scales_inputs for m in embeddings)
  # A configuration saved before the setting: the paper's.
  assert tfattn.TransformerConfig.from_saved({}).embedding_init == "paper"
