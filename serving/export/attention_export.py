"""The graph of the exports' `attention` signature: text in, the pieces and every attention's
weights out, so a REST client can draw the maps without tfattn (`serving/export/modules.py` calls
it).

Outputs, per row (padded to the longest row of the batch; weights past a row's length are 0):
  source_pieces  string  `[batch, s_len]`  each source piece's own text ("" past the length)
  source_length  int32   `[batch]`
  encoder_attention  float32 `[batch, layers, heads, s_len, s_len]`
seq2seq only:
  target_pieces  string  `[batch, t_len]`  the target pieces then "[END]"; row i of the decoder
                                           and cross-attention is the query predicting piece i
  target_length  int32   `[batch]`
  decoder_attention  float32 `[batch, layers, heads, t_len, t_len]`
  cross_attention    float32 `[batch, layers, heads, t_len, s_len]`
classifier only: `label` int64 `[batch]`, `probabilities` float32 `[batch, classes]`.
language model: source_pieces are "[START]" then the text's pieces, source_length counts START,
  and `decoder_attention` float32 `[batch, layers, heads, s_len, s_len]` is the causal
  self-attention (row i: the query predicting piece i + 1); no encoder_attention.

**Bound.** Texts are truncated to the model's max_length pieces, as by every signature (a
target to max_length - 1, plus END). `layer` picks, per row, one layer (0 = the first) or every
layer (-1). The layers axis is padded like the lengths: when some row of the batch asks every
layer, a row that asked one has it first, then zeros, so a row's answer never depends on its
batch-mates (mixing them was refused before, a request that failed only in company).

A request whose weights would exceed `MAX_WEIGHTS` floats fails with
InvalidArgument (HTTP 400) naming the limit, before the model runs: the REST JSON writes a
float32 weight in at most 15 bytes with its comma (shortest round-trip form, up to 9 digits:
"1.07979295e-05,"), so 2^22 weights stay under 60 MiB, inside the 64 MiB body limit.
"""

import tensorflow as tf

from tfattn import text as tfattn_text

# At most this many weights in one response (all rows, kinds, layers and heads together).
MAX_WEIGHTS = 1 << 22
# JSON bytes of one float32 weight at most, separator included ("1.07979295e-05,").
MAX_JSON_BYTES_PER_WEIGHT = 15
ALL_LAYERS = -1

TEXT = tf.TensorSpec([None], tf.string, name="text")
TARGET = tf.TensorSpec([None], tf.string, name="target")
LAYER = tf.TensorSpec([None], tf.int32, name="layer")
SEQ2SEQ_INPUTS = [TEXT, TARGET, LAYER]
CLASSIFIER_INPUTS = [TEXT, LAYER]


def checked_text(strings):
  """Invalid UTF-8 fails with InvalidArgument (HTTP 400), as `serving_default`'s input."""
  return tf.strings.unicode_transcode(strings, "UTF-8", "UTF-8", errors="strict")


def given_targets(tokenizer, target, max_length):
  """`[batch]` target texts -> int32 `[batch, t_len]`: at most max_length - 1 pieces, then END,
  padded with PAD."""
  ragged = tfattn_text.truncate_tokens(tokenizer.tokenize(checked_text(target)), max_length - 1)
  end = tf.fill([ragged.nrows(), 1], tfattn_text.END_ID)
  return tf.concat([ragged, end], axis=1).to_tensor(default_value=tfattn_text.PAD_ID)


def _pad_to(ids, width):
  return tf.pad(ids, [[0, 0], [0, width - tf.shape(ids)[1]]])


def target_ids(source_ids, given, translate):
  """Each row's target: `given` (from `given_targets`), or where a row's target text was empty
  (`given` holds only END), the model's own translation `translate(source_ids of those rows)`.

  Returns int32 `[batch, t_len]`, each row its pieces up to and including END (or the length
  limit), then PAD."""
  own = tf.where(tf.equal(given[:, 0], tfattn_text.END_ID))[:, 0]  # rows to translate
  translated = tf.cond(
    tf.size(own) > 0,
    lambda: translate(tf.gather(source_ids, own)),
    lambda: tf.zeros([0, 1], tf.int32),
  )
  # Cut each translation after its first END (decoding pads after it; this makes sure).
  is_end = (
    tf.cumsum(tf.cast(tf.equal(translated, tfattn_text.END_ID), tf.int32), axis=1, exclusive=True)
    > 0
  )
  translated = tf.where(is_end, tfattn_text.PAD_ID, translated)
  width = tf.maximum(tf.shape(given)[1], tf.shape(translated)[1])
  return tf.tensor_scatter_nd_update(
    _pad_to(given, width), own[:, tf.newaxis], _pad_to(translated, width)
  )


def _check_layers(layer, batch, num_layers):
  """-> (bool `[batch]`: the row wants every layer (-1), else its one layer; the checks)."""
  every = tf.less(layer, 0)
  return every, [
    tf.debugging.assert_equal(
      tf.size(layer),
      batch,
      message="attention: give one layer a row (layer: -1 = every layer, 0 = the first)",
    ),
    tf.debugging.assert_less(
      layer,
      num_layers,
      message=f"attention: layer must be -1 (every layer) or 0 to {num_layers - 1}: this "
      f"model has {num_layers} layers",
    ),
  ]


def _check_budget(batch, layers, heads, query_key_products):
  """Fails with InvalidArgument naming MAX_WEIGHTS when the response would hold more weights."""
  count = (
    tf.cast(batch, tf.int64)
    * tf.cast(layers, tf.int64)
    * heads
    * tf.cast(query_key_products, tf.int64)
  )
  message = tf.strings.format(
    "attention: this request asks for {} weights, more than the limit of "
    + str(MAX_WEIGHTS)
    + " a response may hold (up to 15 bytes each in JSON, under the 64 MiB body limit): send "
    "fewer or shorter texts, or one layer (layer=N) instead of every layer (layer=-1)",
    [count],
  )
  return tf.debugging.Assert(count <= MAX_WEIGHTS, [message])


def _returned_layers(every, num_layers):
  """int32 scalar: the size of the layers axis, every layer when some row (`every` `[batch]`)
  asks for it, else 1."""
  return tf.where(tf.reduce_any(every), num_layers, 1)


def _select(weights, layer, every, query_lengths, key_lengths):
  """Tuple of `[batch, heads, q, k]` (one a layer) -> `[batch, layers or 1, heads, q, k]`, the
  layers asked for (a row asking one where another asks every layer: its layer, then zeros),
  0 outside each row's query and key lengths."""
  stacked = tf.stack(weights, axis=1)  # [batch, layers, heads, q, k]
  one = tf.gather(stacked, tf.maximum(layer, 0), axis=1, batch_dims=1)[:, tf.newaxis]

  def every_layer_axis():
    padded = tf.pad(one, [[0, 0], [0, len(weights) - 1], [0, 0], [0, 0], [0, 0]])
    return tf.where(every[:, tf.newaxis, tf.newaxis, tf.newaxis, tf.newaxis], stacked, padded)

  chosen = tf.cond(tf.reduce_any(every), every_layer_axis, lambda: one)
  queries = tf.sequence_mask(query_lengths, tf.shape(stacked)[3], tf.float32)
  keys = tf.sequence_mask(key_lengths, tf.shape(stacked)[4], tf.float32)
  inside = (
    queries[:, tf.newaxis, tf.newaxis, :, tf.newaxis]
    * keys[:, tf.newaxis, tf.newaxis, tf.newaxis, :]
  )
  return chosen * inside


def seq2seq_maps(model, source_tokenizer, target_tokenizer, source_ids, targets, layer):
  """source_ids int32 `[batch, s_len]`, targets int32 `[batch, t_len]` (from `target_ids`),
  layer int32 `[batch]` -> the seq2seq outputs listed in the module docstring."""
  config = model.config
  batch, s_len, t_len = tf.shape(source_ids)[0], tf.shape(source_ids)[1], tf.shape(targets)[1]
  num_layers = min(config.num_encoder_layers, config.num_decoder_layers)
  every_layer, checks = _check_layers(layer, batch, num_layers)
  returned_layers = _returned_layers(
    every_layer, max(config.num_encoder_layers, config.num_decoder_layers)
  )
  checks.append(
    _check_budget(
      batch, returned_layers, config.num_heads, s_len * s_len + t_len * t_len + t_len * s_len
    )
  )
  with tf.control_dependencies(checks):  # nothing runs before the request is known to fit
    source_ids = tf.identity(source_ids)
  decoder_input = tf.concat([tf.fill([batch, 1], config.start_id), targets[:, :-1]], axis=1)
  _, weights = model(source_ids, decoder_input, return_attention=True)
  source_length = tfattn_text.row_lengths(source_ids)
  target_length = tfattn_text.row_lengths(targets)
  return {
    "source_pieces": tfattn_text.piece_texts(source_tokenizer, source_ids, source_length),
    "source_length": source_length,
    "target_pieces": tfattn_text.piece_texts(target_tokenizer, targets, target_length),
    "target_length": target_length,
    "encoder_attention": _select(weights.encoder, layer, every_layer, source_length, source_length),
    "decoder_attention": _select(weights.decoder, layer, every_layer, target_length, target_length),
    "cross_attention": _select(weights.cross, layer, every_layer, target_length, source_length),
  }


def classifier_maps(model, source_tokenizer, source_ids, layer):
  """source_ids int32 `[batch, s_len]`, layer int32 `[batch]` -> the classifier outputs listed
  in the module docstring."""
  config = model.config
  num_layers = config.num_encoder_layers if config.classifier_body == "transformer" else 1
  batch, s_len = tf.shape(source_ids)[0], tf.shape(source_ids)[1]
  every_layer, checks = _check_layers(layer, batch, num_layers)
  checks.append(
    _check_budget(batch, _returned_layers(every_layer, num_layers), config.num_heads, s_len**2)
  )
  with tf.control_dependencies(checks):
    source_ids = tf.identity(source_ids)
  logits, weights = model(source_ids, return_attention=True)
  probabilities = tf.nn.softmax(logits)
  source_length = tfattn_text.row_lengths(source_ids)
  return {
    "source_pieces": tfattn_text.piece_texts(source_tokenizer, source_ids, source_length),
    "source_length": source_length,
    "encoder_attention": _select(weights.encoder, layer, every_layer, source_length, source_length),
    "label": tf.argmax(probabilities, axis=-1),
    "probabilities": probabilities,
  }


def language_model_maps(model, tokenizer, ids, layer):
  """ids int32 `[batch, length]` (a text's pieces, no START), layer int32 `[batch]` -> the
  language model outputs listed in the module docstring."""
  config = model.config
  batch = tf.shape(ids)[0]
  ids = tf.concat([tf.fill([batch, 1], config.bos_id), ids], axis=1)  # [batch, 1 + length]
  length = tf.shape(ids)[1]
  every_layer, checks = _check_layers(layer, batch, config.num_decoder_layers)
  checks.append(
    _check_budget(
      batch,
      _returned_layers(every_layer, config.num_decoder_layers),
      config.num_heads,
      length**2,
    )
  )
  with tf.control_dependencies(checks):
    ids = tf.identity(ids)
  _, weights = model(ids, return_attention=True)
  lengths = 1 + tfattn_text.row_lengths(ids[:, 1:])
  return {
    "source_pieces": tfattn_text.piece_texts(tokenizer, ids, lengths),
    "source_length": lengths,
    "decoder_attention": _select(weights.decoder, layer, every_layer, lengths, lengths),
  }
