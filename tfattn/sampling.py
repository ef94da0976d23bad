"""Drawing the next token: temperature, top-k and top-p (nucleus) sampling with a seed per row.

Randomness is counter-based and keyed by each row's own seed: the number row b uses at step t is
Threefry-2x32-20 (Salmon et al. 2011, "Parallel random numbers: as easy as 1, 2, 3"; JAX's
generator) of the counter (t, 0) under the key made of the row's 64-bit seed, written with
TensorFlow's uint32 ops. So a row's draws depend only on its seed and its own logits (not on its
batch-mates, the batch size or the device's op order), and graph mode and XLA produce the same
bits. TensorFlow 2.21's stateless random ops take one seed per call (a seed per row needs a loop
over rows: `tf.vectorized_map` falls back to one) and give other numbers under XLA than in graph
mode for the same seed; `tf.random.experimental.index_shuffle` takes a seed per row but has no XLA
kernel (WORKSPACE_NOTES, "DecodeOptions, sampling, n-best").

A token is drawn by inverting the cumulative distribution with that one number: the first token
whose cumulative probability exceeds u * total. One number per row and step (not one per
vocabulary entry, as a Gumbel-max draw needs) is what lets the numbers of a whole search be
computed before its loop. A top-k cut sorts only the k kept tokens; a nucleus without one is
found by bisection, without sorting the vocabulary.
"""

from typing import Callable, Optional, Tuple

import tensorflow as tf

from tfattn.decode_options import DecodeOptions
from tfattn.special_ids import PAD_ID

# Temperatures below this are subnormal in float32 (flushed to 0 on CPUs): `draw` then takes the
# limit T -> 0 instead of dividing.
SMALLEST_NORMAL_FLOAT32 = 1.1754943508222875e-38
_ROTATIONS = (13, 15, 26, 6, 17, 29, 16, 24)  # Threefry-2x32's rotation constants
_KEY_PARITY = 0x1BD11BDA
_ROUNDS = 20


def _u32(value) -> tf.Tensor:
  return tf.constant(value, tf.uint32)


def _rotate_left(x, bits: int):
  return tf.bitwise.bitwise_or(
    tf.bitwise.left_shift(x, _u32(bits)), tf.bitwise.right_shift(x, _u32(32 - bits))
  )


def threefry2x32(
  key: Tuple[tf.Tensor, tf.Tensor], counter: Tuple[tf.Tensor, tf.Tensor]
) -> Tuple[tf.Tensor, tf.Tensor]:
  """Threefry-2x32 with 20 rounds (Random123): a keyed bijection of 64-bit counters.

  Args:
    key: two uint32 tensors, the key's words.
    counter: two uint32 tensors, the counter's words; broadcastable with the key.
  Returns:
    Two uint32 tensors of the broadcast shape: 64 random bits per counter.
  """
  xor = tf.bitwise.bitwise_xor
  schedule = (key[0], key[1], xor(xor(key[0], key[1]), _u32(_KEY_PARITY)))
  x0, x1 = counter[0] + schedule[0], counter[1] + schedule[1]
  for round_index in range(_ROUNDS):
    x0 += x1
    x1 = xor(_rotate_left(x1, _ROTATIONS[round_index % 8]), x0)
    if round_index % 4 == 3:  # key injection every 4 rounds
      injection = round_index // 4 + 1
      x0 += schedule[injection % 3]
      x1 += schedule[(injection + 1) % 3] + _u32(injection)
  return x0, x1


def _seed_words(seeds: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
  """int `[batch]` seeds -> their low and high 32 bits as uint32 `[batch]` (a Threefry key)."""
  seeds = tf.cast(seeds, tf.int64)
  low = tf.bitwise.bitwise_and(seeds, 0xFFFFFFFF)
  high = tf.bitwise.bitwise_and(tf.bitwise.right_shift(seeds, 32), 0xFFFFFFFF)
  return tf.cast(low, tf.uint32), tf.cast(high, tf.uint32)


def uniforms(seeds: tf.Tensor, length) -> tf.Tensor:
  """float32 `[batch, length]` in [0, 1): entry [b, t] depends only on seeds[b] and t.

  Args:
    seeds: int32 or int64 `[batch]`, one seed per row.
    length: how many numbers each row gets (steps 0 .. length - 1).
  """
  low, high = _seed_words(seeds)
  steps = tf.cast(tf.range(length), tf.uint32)[tf.newaxis]  # [1, length]
  bits, _ = threefry2x32(
    (low[:, tf.newaxis], high[:, tf.newaxis]), (steps, tf.zeros_like(steps))
  )  # [batch, length]
  # The top 24 bits: every float32 in the result is exact, the largest is 1 - 2^-24.
  return tf.cast(tf.bitwise.right_shift(bits, _u32(8)), tf.float32) * 2.0**-24


def _first_above(probs: tf.Tensor, uniform: tf.Tensor) -> tf.Tensor:
  """int32 `[batch]`: the first index whose cumulative probability exceeds uniform * total, so
  index i is drawn with probability probs[i] / total. Never an index of probability 0, even
  when rounding leaves u * total at or above the total (then the last index with mass)."""
  cdf = tf.math.cumsum(probs, axis=-1)  # [batch, n]
  total = cdf[:, -1:]  # [batch, 1]
  positions = tf.range(tf.shape(probs)[-1])[tf.newaxis]  # [1, n]
  beyond = tf.shape(probs)[-1]
  above = (cdf > uniform[:, tf.newaxis] * total) & (probs > 0)  # [batch, n]
  first = tf.reduce_min(tf.where(above, positions, beyond), axis=-1)  # [batch]
  last_with_mass = tf.reduce_max(tf.where(probs > 0, positions, -1), axis=-1)  # [batch]
  return tf.where(first < beyond, first, last_with_mass)


def _top_k_size(top_k: int, logits):
  """How many of the most likely tokens a top-k cut keeps, or None when it keeps them all (0,
  or a k >= the vocabulary). A Python int where the vocabulary size is static, as a model's is
  (XLA needs k static)."""
  vocab = logits.shape[-1]
  if not top_k or (vocab is not None and top_k >= vocab):
    return None
  return top_k if vocab is not None else tf.minimum(top_k, tf.shape(logits)[-1])


# Bit patterns of non-negative float32s are ordered like the floats; this one is just above 1.0,
# so no probability reaches it, and 30 halvings of [0, it) leave an interval of one.
_ABOVE_ONE_BITS = 0x3F800001
_HALVINGS = 30


def _nucleus(probs: tf.Tensor, top_p: float) -> tf.Tensor:
  """bool `[batch, vocab]`: the smallest set of most likely tokens that holds top_p of the
  probability (every token tied at its edge included), found without sorting: per row, the
  largest threshold t whose tokens (probability >= t) still hold top_p, by bisection over the
  probabilities' bit patterns. 30 fixed steps of a masked sum: a full sort of the vocabulary
  took 2x longer in graph mode and 17x longer under XLA on the CPU (WORKSPACE_NOTES)."""
  bits = tf.bitcast(probs, tf.int32)  # [batch, vocab]
  goal = top_p * tf.reduce_sum(probs, axis=-1)  # [batch]
  rows = tf.shape(probs)[:1]
  low = tf.zeros(rows, tf.int32)  # every token: holds all of it
  high = tf.fill(rows, tf.constant(_ABOVE_ONE_BITS, tf.int32))  # no token: holds nothing
  for _ in range(_HALVINGS):
    middle = low + (high - low) // 2  # [batch]
    mass = tf.reduce_sum(tf.where(bits >= middle[:, tf.newaxis], probs, 0.0), axis=-1)
    enough = mass >= goal
    low, high = tf.where(enough, middle, low), tf.where(enough, high, middle)
  return bits >= low[:, tf.newaxis]


def draw(
  logits: tf.Tensor, uniform: tf.Tensor, options: Optional[DecodeOptions] = None, **cut
) -> tf.Tensor:
  """One token a row from softmax(logits / temperature), kept to the top_k most likely tokens
  (0: all), then to the nucleus of what remains: the smallest set of most likely tokens whose
  renormalised probability reaches top_p (1: all), every token tied at its edge included (in
  both branches below). The order of Model Garden's and Hugging
  Face's samplers. With a top-k cut the k tokens are sorted (`tf.math.top_k`) and the draw runs
  in that order; without one nothing is sorted (see `_nucleus`) and the draw runs in vocabulary
  order.

  Args:
    logits: float `[batch, vocab]`.
    uniform: float32 `[batch]` in [0, 1), the row's random number for this draw.
    options: the `DecodeOptions` whose sampling fields apply (None: the defaults), these:
      temperature: > 0; towards 0 the draw becomes the argmax. Below float32's smallest normal
        (1.2e-38) it is that limit: each row's most likely tokens (all of them where several
        tie) equally likely, nothing else.
      top_k: keep the k most likely tokens (a Python int: XLA needs it static).
      top_p: keep the nucleus of this probability mass, in (0, 1].
    **cut: fields that replace the options' (e.g. `top_k=5`), checked as DecodeOptions are.
  Returns:
    int32 `[batch]` token ids.
  """
  options = (options or DecodeOptions()).replace(**cut)
  temperature, top_k, top_p = options.temperature, options.top_k, options.top_p
  logits = tf.cast(logits, tf.float32)
  # Subtracting the maximum first keeps tiny temperatures finite: the others go to -inf, not NaN.
  shifted = logits - tf.reduce_max(logits, axis=-1, keepdims=True)  # [batch, vocab], max 0
  if temperature < SMALLEST_NORMAL_FLOAT32:
    # A subnormal temperature is flushed to 0 on CPUs (0 / 0 = NaN: no token, id -1). Its
    # limit is exact: every maximum equally likely, nothing else.
    scaled = tf.where(shifted < 0.0, -float("inf"), 0.0)
  else:
    scaled = shifted / temperature  # [batch, vocab]
  keep = _top_k_size(top_k, logits)
  if keep is None:
    probs = tf.nn.softmax(scaled)  # [batch, vocab]
    if top_p < 1.0:
      probs = tf.where(_nucleus(probs, top_p), probs, 0.0)
    return _first_above(probs, uniform)
  scaled, order = tf.math.top_k(scaled, k=keep)  # [batch, k], most likely first
  probs = tf.nn.softmax(scaled)  # renormalised over the k
  if top_p < 1.0:  # the k are sorted: the nucleus is a prefix, and every token tied at its edge
    mass_before = tf.math.cumsum(probs, axis=-1, exclusive=True)  # [batch, k]
    edge = tf.reduce_min(
      tf.where(mass_before < top_p, probs, float("inf")), axis=-1, keepdims=True
    )  # [batch, 1]: the smallest probability in the prefix (its first token is always in it)
    probs = tf.where(probs >= edge, probs, 0.0)
  return tf.gather(order, _first_above(probs, uniform), batch_dims=1)


# (logits float32 `[batch, vocab]`, the search's loop state with `.step` and `.index`, each
# row's example) -> int32 `[batch]`.
ChooseFn = Callable[[tf.Tensor, object], tf.Tensor]


def sampling_choice(seeds: tf.Tensor, max_steps, options: DecodeOptions) -> ChooseFn:
  """A token-choice function for `decoding.token_loop` that draws each row's token at step t
  with the row's t-th number, as `options` say (`draw`). The numbers of every step are computed
  here, once, before the loop (a `[batch, max_steps]` table), so a step costs one gather and
  the draw.

  Args:
    seeds: int `[batch]`, one seed per row.
    max_steps: at least the number of steps the search can take (a static int under XLA).
    options: the sampling settings.
  """
  table = uniforms(seeds, max_steps)  # [batch, max_steps]

  def choose(logits, state):  # the rows' own examples' numbers (rows leave as they finish)
    return draw(logits, tf.gather(tf.gather(table, state.step, axis=1), state.index), options)

  return choose


def row_seeds(batch, seed: int) -> tf.Tensor:
  """int64 `[batch]`: seed + row index, the default when no per-row seeds are given."""
  return tf.constant(seed, tf.int64) + tf.range(tf.cast(batch, tf.int64))


def source_seeds(source_ids: tf.Tensor, seed: int, pad_id: int = PAD_ID) -> tf.Tensor:
  """int64 `[batch]`: `seed` mixed with a fingerprint (FarmHash Fingerprint64, stable across
  platforms) of each row's tokens, trailing padding excluded. A source then samples the same
  output whatever else is in its batch and wherever it sits there, as serving with server-side
  batching needs; computed in graph mode (string ops), outside any XLA function."""
  rows = tf.RaggedTensor.from_tensor(source_ids, padding=pad_id)  # trailing padding dropped
  text = tf.strings.reduce_join(tf.strings.as_string(rows), axis=1, separator=" ")  # [batch]
  fingerprint = tf.strings.to_hash_bucket_fast(text, 2**62)  # int64 [batch]
  return tf.bitwise.bitwise_xor(fingerprint, tf.constant(seed, tf.int64))
