"""What gets exported: a model plus its tokenizers, with text- and token-level signatures.

The root object also follows the Reusable SavedModel API (`__call__`, `variables`,
`trainable_variables`, `regularization_losses`), so other TF programs can call it, map it over a
`tf.data` pipeline, wrap it in `keras.layers.TFSMLayer` or fine-tune it.
"""

import tensorflow as tf

from serving import attention_export
from tfattn import decoding, shapes
from tfattn import text as tfattn_text

TEXT = tf.TensorSpec([None], tf.string, name="text")
IDS = tf.TensorSpec([None, None], tf.int32, name="source_ids")
TARGET_IDS = tf.TensorSpec([None, None], tf.int32, name="target_ids")

DECODE_MODES = ("graph", "xla")
# The XLA decoder's source lengths: 16, 32, ... then max_length, one program each per batch size.
SMALLEST_SOURCE_BUCKET = 16


class _Exportable(tf.Module):
  # tf.Module computes these as properties; the Reusable SavedModel API needs them stored as
  # attributes so that the loaded object has them.
  variables = trainable_variables = regularization_losses = None

  def __init__(self, model, source_tokenizer, truncate="right", name=None):
    super().__init__(name=name)
    self.model = model
    self.source_tokenizer = source_tokenizer
    self.max_length = model.config.max_length
    self.truncate = truncate  # which end of a long input is cut, as in training
    self.variables = list(model.variables)
    self.trainable_variables = list(model.trainable_variables)
    self.regularization_losses = []

  def _source_ids(self, text):
    """`[batch]` strings -> int32 `[batch, length]`, padded, at most max_length tokens.

    Invalid UTF-8 fails here with InvalidArgument (HTTP 400 in TF Serving) instead of being
    silently replaced."""
    text = tf.strings.unicode_transcode(text, "UTF-8", "UTF-8", errors="strict")
    ragged = self.source_tokenizer.tokenize(text)
    return tfattn_text.truncate_tokens(ragged, self.max_length, self.truncate).to_tensor(
        default_value=tfattn_text.PAD_ID)

  def _checked_ids(self, ids, vocab_size, name):
    """Token-level inputs are checked, not trusted: an id outside `[0, vocab_size)` or more than
    max_length tokens fails with InvalidArgument (HTTP 400). Without the check a graph-mode GPU
    gather returns zeros and an XLA gather clamps the id: a wrong answer instead of an error."""
    checks = [
        tf.debugging.assert_non_negative(
            ids, message=f"{name} holds a negative token id; ids must be in [0, {vocab_size})"),
        tf.debugging.assert_less(
            ids, tf.constant(vocab_size, ids.dtype),
            message=f"{name} holds a token id >= the vocabulary size {vocab_size}"),
        tf.debugging.assert_less_equal(
            tf.shape(ids)[1], self.max_length,
            message=f"{name} has more tokens than max_length={self.max_length}"),
    ]
    with tf.control_dependencies(checks):
      return tf.identity(ids)

  @tf.function(input_signature=[IDS])
  def encode(self, source_ids):
    """Token ids -> encoder states `[batch, length, d_model]` (padding rows are masked)."""
    source_ids = self._checked_ids(source_ids, self.model.config.source_vocab_size, "source_ids")
    return {"encoding": tf.cast(self.model.encoder(source_ids), tf.float32)}


class Seq2SeqExport(_Exportable):
  """Signatures: serving_default (text -> translation, score), translate_ids, encode, score.

  decode="graph" runs the key/value-cached search as a graph-mode `tf.while_loop`; decode="xla"
  pads the source to a length bucket and runs the padded-cache search compiled with XLA
  (`jit_compile=True`): one program per (bucket, batch size), the same answers.
  """

  def __init__(self, model, source_tokenizer, target_tokenizer, beam_size=4, alpha=0.6,
               extra_decode_length=20, decode="graph"):
    super().__init__(model, source_tokenizer, name="seq2seq_export")
    if decode not in DECODE_MODES:
      raise ValueError(f"decode must be one of {DECODE_MODES}, got {decode!r}")
    self.target_tokenizer = target_tokenizer
    self.beam_size = beam_size
    self.alpha = alpha
    self.extra_decode_length = extra_decode_length
    self.decode_mode = decode
    self.length_buckets = None  # graph mode decodes any length as it comes
    if decode == "xla":  # only then: a graph export holds no must-compile function
      self.length_buckets = tuple(shapes.length_buckets(self.max_length,
                                                        SMALLEST_SOURCE_BUCKET))
      self._decode_padded = tf.function(self._search_padded, input_signature=[IDS],
                                        jit_compile=True)

  def _decode(self, source_ids):
    """int32 `[batch, length]` -> (ids `[batch, min(length + extra, max_length)]`, scores)."""
    if self.decode_mode == "graph":
      return decoding.best_output(self.model, source_ids, self.beam_size, self.alpha,
                                  self.extra_decode_length)
    length = tf.shape(source_ids)[1]
    buckets = tf.constant(self.length_buckets)
    bucket = tf.reduce_min(tf.boolean_mask(buckets, buckets >= length))
    ids, scores = self._decode_padded(tf.pad(source_ids, [[0, 0], [0, bucket - length]]))
    # Limits come from each example's own length, so columns past the unpadded buffer size are
    # padding: trimming them gives exactly the graph mode's output shape.
    return ids[:, :decoding.decode_length(self.model, source_ids,
                                          extra_decode_length=self.extra_decode_length)], scores

  def _search_padded(self, source_ids):
    """The search on a bucket-padded `[batch, bucket]` source, compiled with XLA as
    `_decode_padded`: every shape inside is static for a given (batch, bucket)."""
    return decoding.best_output(self.model, source_ids, self.beam_size, self.alpha,
                                self.extra_decode_length, padded_decode=True)

  @tf.function(input_signature=[TEXT])
  def serve_text(self, text):
    """Raw text `[batch]` -> {"translation": `[batch]` string, "score": float32 `[batch]`}."""
    ids, score = self._decode(self._source_ids(text))
    return {"translation": self.target_tokenizer.detokenize(ids), "score": score}

  @tf.function(input_signature=[IDS])
  def translate_ids(self, source_ids):
    """Token ids -> {"ids": int32 `[batch, length]` ending in END, "score": float32 `[batch]`}."""
    ids, score = self._decode(
        self._checked_ids(source_ids, self.model.config.source_vocab_size, "source_ids"))
    return {"ids": ids, "score": score}

  @tf.function(input_signature=[IDS, TARGET_IDS])
  def score(self, source_ids, target_ids):
    """log p(target_ids | source_ids), teacher-forced; target_ids end with END, 0 = padding.

    Returns {"log_prob": float32 `[batch]`}. Differentiable: the fine-tuning entry point."""
    source_ids = self._checked_ids(source_ids, self.model.config.source_vocab_size, "source_ids")
    target_ids = self._checked_ids(target_ids, self.model.config.target_vocab_size, "target_ids")
    start = tf.fill([tf.shape(target_ids)[0], 1], self.model.config.bos_id)
    decoder_input = tf.concat([start, target_ids[:, :-1]], axis=1)
    log_probs = tf.nn.log_softmax(self.model(source_ids, decoder_input))
    token_log_probs = tf.gather(log_probs, target_ids, batch_dims=2)
    mask = tf.cast(tf.not_equal(target_ids, self.model.config.pad_id), tf.float32)
    return {"log_prob": tf.reduce_sum(token_log_probs * mask, axis=1)}

  @tf.function(input_signature=[TEXT])
  def __call__(self, text):
    """Reusable SavedModel entry: `[batch]` text -> `[batch]` translations."""
    return self.serve_text(text)["translation"]

  @tf.function(input_signature=attention_export.SEQ2SEQ_INPUTS)
  def attention(self, text, target, layer):
    """Attention maps: text `[batch]`, target `[batch]` ("" = the model's own translation,
    decoded as serving_default decodes), layer int32 `[batch]` (-1 = every layer) -> pieces and
    weights (`serving/attention_export.py` lists the outputs and the size limit)."""
    source_ids = self._source_ids(text)
    given = attention_export.given_targets(self.target_tokenizer, target, self.max_length)
    targets = attention_export.target_ids(source_ids, given, lambda ids: self._decode(ids)[0])
    return attention_export.seq2seq_maps(self.model, self.source_tokenizer,
                                         self.target_tokenizer, source_ids, targets, layer)

  def signatures(self):
    return {"serving_default": self.serve_text, "translate_ids": self.translate_ids,
            "encode": self.encode, "score": self.score, "attention": self.attention}


class ClassifierExport(_Exportable):
  """Signatures: serving_default (text -> label, probabilities), classify_ids, encode."""

  def __init__(self, model, source_tokenizer, truncate="right"):
    super().__init__(model, source_tokenizer, truncate, name="classifier_export")

  def _classify(self, source_ids):
    probabilities = tf.nn.softmax(self.model(source_ids))
    return {"label": tf.argmax(probabilities, axis=-1), "probabilities": probabilities}

  @tf.function(input_signature=[TEXT])
  def serve_text(self, text):
    """Raw text `[batch]` -> {"label": int64 `[batch]`, "probabilities": `[batch, classes]`}."""
    return self._classify(self._source_ids(text))

  @tf.function(input_signature=[IDS])
  def classify_ids(self, source_ids):
    """Token ids -> {"label": int64 `[batch]`, "probabilities": `[batch, classes]`}."""
    return self._classify(
        self._checked_ids(source_ids, self.model.config.source_vocab_size, "source_ids"))

  @tf.function(input_signature=[TEXT])
  def __call__(self, text):
    """Reusable SavedModel entry: `[batch]` text -> `[batch, classes]` probabilities."""
    return self.serve_text(text)["probabilities"]

  @tf.function(input_signature=attention_export.CLASSIFIER_INPUTS)
  def attention(self, text, layer):
    """Attention maps: text `[batch]`, layer int32 `[batch]` (-1 = every layer) -> pieces,
    self-attention weights, label and probabilities (`serving/attention_export.py`)."""
    return attention_export.classifier_maps(self.model, self.source_tokenizer,
                                            self._source_ids(text), layer)

  def signatures(self):
    return {"serving_default": self.serve_text, "classify_ids": self.classify_ids,
            "encode": self.encode, "attention": self.attention}
