"""How likely a language model finds given texts: the computation its training loss makes (the
next-token cross-entropy, here without label smoothing), kept per token.

  log_probs, counts = scoring.token_log_likelihoods(model, tokens)
  log_probs.sum(-1)  # each text's log-likelihood, [END] included: -(its training loss sum)
"""

import tensorflow as tf

from tfattn import losses


def next_token_pairs(tokens: tf.Tensor, bos_id: int, eos_id: int, pad_id: int):
  """A language model's teacher-forced pairs for whole texts: [START] + the text in, the text
  + [END] out.

  Args:
    tokens: int `[batch, length]`, each text's pieces without [START] or [END], right-padded
      with `pad_id`.
  Returns:
    (inputs, targets), int32 `[batch, length + 1]` each, and int32 `[batch]` the pieces of each
    text (its [END] sits at that index of `targets`).
  """
  tokens = tf.cast(tokens, tf.int32)
  rows, length = tf.shape(tokens)[0], tf.shape(tokens)[1]
  counts = tf.reduce_sum(tf.cast(tf.not_equal(tokens, pad_id), tf.int32), 1)  # [batch]
  inputs = tf.concat([tf.fill([rows, 1], bos_id), tokens], 1)
  padded = tf.concat([tokens, tf.fill([rows, 1], pad_id)], 1)
  at_end = tf.equal(tf.range(length + 1)[tf.newaxis], counts[:, tf.newaxis])
  return inputs, tf.where(at_end, eos_id, padded), counts


def token_log_likelihoods(model, tokens: tf.Tensor):
  """Each text's tokens scored one by one: log p(token | [START] and the tokens before it),
  then log p([END] | the whole text).

  Args:
    model: a `LanguageModel` (ids `[batch, length]` -> logits `[batch, length, vocab]`).
    tokens: int32 `[batch, length]`, each text's pieces without [START] or [END], right-padded
      with the pad id; at most `max_length - 1` a row.
  Returns:
    (float32 `[batch, length + 1]` log-probabilities, 0 past each text's [END];
     int32 `[batch]` tokens counted: the text's pieces and its [END]).
  """
  config = model.config
  inputs, targets, counts = next_token_pairs(tokens, config.bos_id, config.eos_id, config.pad_id)
  # The training loss's own function, unsmoothed: -log p(target), 0 at padding.
  nll, weights = losses.label_smoothed_cross_entropy(model(inputs), targets, 0.0, config.pad_id)
  return tf.where(weights > 0, -nll, 0.0), counts + 1  # 0, not -0, past the text
