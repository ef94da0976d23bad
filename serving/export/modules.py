"""What gets exported: a model plus its tokenizers, with text- and token-level signatures.

The root object also follows the Reusable SavedModel API (`__call__`, `variables`,
`trainable_variables`, `regularization_losses`), so other TF programs can call it, map it over a
`tf.data` pipeline, wrap it in `keras.layers.TFSMLayer` or fine-tune it.
"""

import numpy as np
import tensorflow as tf

from serving.export import attention_export
from tfattn import decoding, scoring
from tfattn import text as tfattn_text
from tfattn.decode_options import BEAM, DECODE_MODES, SAMPLE, DecodeOptions
from tfattn.support import shapes

TEXT = tf.TensorSpec([None], tf.string, name="text")
IDS = tf.TensorSpec([None, None], tf.int32, name="source_ids")
TARGET_IDS = tf.TensorSpec([None, None], tf.int32, name="target_ids")
SEEDS = tf.TensorSpec([None], tf.int64, name="seed")
# A language model's per-row generation length (transformers' max_new_tokens).
NEW_TOKENS = tf.TensorSpec([None], tf.int32, name="max_new_tokens")
# What the warm-up records ask of the signatures that take max_new_tokens (any value compiles
# the same XLA program; a small one keeps the replay short).
WARMUP_NEW_TOKENS = 2

# The XLA decoder's source lengths: 16, 32, ... then max_length, one program each per batch size.
SMALLEST_SOURCE_BUCKET = 16


def _text_array(texts):
  """A list of str or bytes -> a numpy object array of bytes (a string tensor's value)."""
  return np.array([t.encode() if isinstance(t, str) else t for t in texts], dtype=object)


class _Exportable(tf.Module):
  # tf.Module computes these as properties; the Reusable SavedModel API needs them stored as
  # attributes so that the loaded object has them.
  variables = trainable_variables = regularization_losses = None
  # Exports that decode set these: "graph" or "xla", the XLA source length buckets, and the
  # DecodeOptions every signature decodes with.
  decode_mode = length_buckets = options = None

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
      default_value=tfattn_text.PAD_ID
    )

  def _checked_ids(self, ids, vocab_size, name):
    """Token-level inputs are checked, not trusted: an id outside `[0, vocab_size)` or more than
    max_length tokens fails with InvalidArgument (HTTP 400). Without the check a graph-mode GPU
    gather returns zeros and an XLA gather clamps the id: a wrong answer instead of an error."""
    checks = [
      tf.debugging.assert_non_negative(
        ids, message=f"{name} holds a negative token id; ids must be in [0, {vocab_size})"
      ),
      tf.debugging.assert_less(
        ids,
        tf.constant(vocab_size, ids.dtype),
        message=f"{name} holds a token id >= the vocabulary size {vocab_size}",
      ),
      tf.debugging.assert_less_equal(
        tf.shape(ids)[1],
        self.max_length,
        message=f"{name} has more tokens than max_length={self.max_length}",
      ),
    ]
    with tf.control_dependencies(checks):
      return tf.identity(ids)

  @tf.function(input_signature=[IDS], autograph=False)
  def encode(self, source_ids):
    """Token ids -> encoder states `[batch, length, d_model]` (padding rows are masked)."""
    source_ids = self._checked_ids(source_ids, self.model.config.source_vocab_size, "source_ids")
    return {"encoding": tf.cast(self.model.encoder(source_ids), tf.float32)}

  def warmup_requests(self, texts, compiled_only=False):
    """[(signature name, inputs)] for the warm-up file: requests with `texts` that call every
    text signature, or with `compiled_only`, one per distinct XLA program (none here)."""
    return [] if compiled_only else [("serving_default", {"text": _text_array(texts)})]


class _DecodingExport(_Exportable):
  """What the exports that decode share (seq2seq, language model): the searches `options` ask
  for, in graph mode or, with decode="xla", compiled with XLA over length buckets; a `sample`
  signature where the options sample; their warm-up requests. A subclass supplies `_answers`
  (hypotheses -> the signature's outputs) and names its n-best signature.

  With `up_to_length` (the language model's), the searches also run with a length per row
  (`max_new_tokens`, int32 `[batch]`): the options' with max_decode_length = up_to_length as the
  buffer (`up_to_options`), each row cut to its own request (`decoding.within`)."""

  NBEST_SIGNATURE = ""  # the signature that returns every beam
  up_to_options = None  # the options of the searches that take max_new_tokens

  def __init__(
    self,
    model,
    tokenizer,
    options: DecodeOptions,
    decode,
    *,
    truncate,
    name,
    max_length=None,
    up_to_length=None,
  ):
    super().__init__(model, tokenizer, truncate, name=name)
    if decode not in DECODE_MODES:
      raise ValueError(f"decode must be one of {DECODE_MODES}, got {decode!r}")
    if max_length is not None:
      self.max_length = max_length
    self.options = options
    self.decode_mode = decode  # graph mode decodes any length as it comes: no length buckets
    if up_to_length is not None:
      self.up_to_options = options.replace(max_decode_length=up_to_length)
    # A beam export's best hypothesis is the n-best search's first: one search, one program.
    self._best_is_first_beam = options.strategy == BEAM and options.beam_size > 1
    # Each search is one function that every signature running it calls: traced and saved once
    # (a greedy seq2seq export's serving_default, translate_ids and attention share one loop).
    # decode="xla" compiles them, over length buckets; only then does an export hold a
    # must-compile function.
    if decode == "xla":
      self.length_buckets = tuple(shapes.length_buckets(self.max_length, SMALLEST_SOURCE_BUCKET))
    self._nbest_search = self._search_function(self._search_nbest, [IDS])
    if not self._best_is_first_beam:
      self._best_search = self._search_function(self._search_best, [IDS, SEEDS])
    if self.up_to_options is not None:
      self._nbest_up_to_search = self._search_function(self._search_nbest_up_to, [IDS, NEW_TOKENS])
      if not self._best_is_first_beam:
        self._best_up_to_search = self._search_function(
          self._search_best_up_to, [IDS, SEEDS, NEW_TOKENS]
        )
    if options.strategy == SAMPLE:  # the signature exists only where it samples
      self.sample = tf.function(self._sample, input_signature=[TEXT, SEEDS], autograph=False)

  @property
  def _compiled(self):
    """Whether the searches compile with XLA: then their input is padded to its length bucket,
    and every shape inside is static for a given (batch, bucket)."""
    return self.decode_mode == "xla"

  def _search_function(self, search, signature):
    """`search` as the one function of its signature, compiled with XLA in an XLA export."""
    jit_compile = True if self._compiled else None
    return tf.function(search, input_signature=signature, jit_compile=jit_compile, autograph=False)

  # --- The searches ---

  def _search_best(self, ids, seeds):
    """The best hypothesis a row (`_best_search`), sampling with `seeds` where it samples."""
    return decoding.decode(self.model, ids, self.options, seeds=seeds, padded_decode=self._compiled)

  def _search_nbest(self, ids):
    """Every beam (`_nbest_search`)."""
    return decoding.nbest(self.model, ids, self.options, padded_decode=self._compiled)

  def _search_best_up_to(self, ids, seeds, max_new_tokens):
    """`_search_best` with a length per row (`_best_up_to_search`)."""
    return decoding.decode(
      self.model,
      ids,
      self.up_to_options,
      seeds=seeds,
      padded_decode=self._compiled,
      max_new_tokens=max_new_tokens,
    )

  def _search_nbest_up_to(self, ids, max_new_tokens):
    """`_search_nbest` with a length per row (`_nbest_up_to_search`)."""
    return decoding.nbest(
      self.model,
      ids,
      self.up_to_options,
      padded_decode=self._compiled,
      max_new_tokens=max_new_tokens,
    )

  def _run(self, search, ids, *args) -> decoding.Hypotheses:
    """One of the searches on `ids`: as it comes in graph mode, padded to its bucket in XLA."""
    if self._compiled:
      return self._padded(search, ids, *args)
    return search(ids, *args)

  def _padded(self, search, ids, *args) -> decoding.Hypotheses:
    """Runs `search` on the input padded to its length bucket, then `_trimmed`."""
    length = tf.shape(ids)[1]
    buckets = tf.constant(self.length_buckets)
    bucket = tf.reduce_min(tf.boolean_mask(buckets, buckets >= length))
    return self._trimmed(search(tf.pad(ids, [[0, 0], [0, bucket - length]]), *args), ids)

  def _trimmed(self, found: decoding.Hypotheses, ids) -> decoding.Hypotheses:
    """A padded search's hypotheses in the graph mode's output shape (as they are, unless the
    output length depends on the input's)."""
    del ids
    return found

  def _nbest(self, ids, max_new_tokens=None) -> decoding.Hypotheses:
    """int32 `[batch, length]` -> every beam: ids `[batch, beam, out_length]`, scores and
    log_probs `[batch, beam]`, best first. With `max_new_tokens` (int32 `[batch]`), the
    `up_to_options` search, each row cut to its own length."""
    if max_new_tokens is None:
      return self._run(self._nbest_search, ids)
    return self._run(self._nbest_up_to_search, ids, max_new_tokens)

  def _best(self, ids, seeds=None, max_new_tokens=None) -> decoding.Hypotheses:
    """int32 `[batch, length]` -> the best hypothesis a row as the options say: ids
    `[batch, out_length]`, scores and log_probs `[batch]`. Sampling draws with `seeds` (int64
    `[batch]`), else with the input's own (`decoding.source_seeds`). With `max_new_tokens`
    (int32 `[batch]`), the `up_to_options` search, each row cut to its own length."""
    if self._best_is_first_beam:
      return decoding.first_beam(self._nbest(ids, max_new_tokens))
    options = self.options if max_new_tokens is None else self.up_to_options
    if seeds is None:
      seeds = decoding.source_seeds(ids, options, self.model.config.pad_id)
    if seeds is None:  # the search takes seeds whether it samples or not
      seeds = tf.zeros([tf.shape(ids)[0]], tf.int64)
    if max_new_tokens is None:
      return self._run(self._best_search, ids, seeds)
    return self._run(self._best_up_to_search, ids, seeds, max_new_tokens)

  def _answers(self, found: decoding.Hypotheses) -> dict:
    raise NotImplementedError

  def _sample(self, text, seed, max_new_tokens=None):
    """Raw text `[batch]` and int64 seeds `[batch]` (and int32 `max_new_tokens` `[batch]`) ->
    the signature's outputs `[batch]`: row i drawn with seed[i] (the same seed and text, the
    same answer)."""
    check = tf.debugging.assert_equal(
      tf.shape(seed),
      tf.shape(text),
      message="seed must hold one int64 per text (a [batch] tensor like text)",
    )
    with tf.control_dependencies([check]):
      seed = tf.identity(seed)
    if max_new_tokens is not None:
      max_new_tokens = self._checked_new_tokens(max_new_tokens, text)
    return self._answers(self._best(self._source_ids(text), seed, max_new_tokens))

  def _checked_new_tokens(self, max_new_tokens, text):
    """int32 `[batch]`, one per text, each at least 1 (InvalidArgument, HTTP 400, otherwise);
    a value above the model's limit is cut to it by the search."""
    checks = [
      tf.debugging.assert_equal(
        tf.shape(max_new_tokens),
        tf.shape(text),
        message="max_new_tokens must hold one int32 per text (a [batch] tensor like text)",
      ),
      tf.debugging.assert_positive(max_new_tokens, message="max_new_tokens must be at least 1"),
    ]
    with tf.control_dependencies(checks):
      return tf.identity(max_new_tokens)

  def warmup_requests(self, texts, compiled_only=False):
    """[(signature name, inputs)]: one request with `texts` for each text signature, or with
    `compiled_only`, one for each distinct XLA program (serving_default's search and, unless it
    is the same one, the n-best signature's; `sample` shares serving_default's)."""
    texts = _text_array(texts)
    requests = [("serving_default", {"text": texts})]
    if not (compiled_only and self._best_is_first_beam):
      requests.append((self.NBEST_SIGNATURE, {"text": texts}))
    if self.options.strategy == SAMPLE and not compiled_only:
      requests.append(("sample", {"text": texts, "seed": np.arange(len(texts), dtype=np.int64)}))
    return requests


class Seq2SeqExport(_DecodingExport):
  """Signatures: serving_default (text -> translation, score, log_prob), translate_nbest (text
  -> every beam's translation, score and log_prob, best first), translate_ids, encode, score,
  and in an export whose options sample, `sample` (text and a seed per row -> translation,
  score, log_prob).

  Every signature decodes as `options` say (beam size, alpha, length limits, sampling settings);
  translate_nbest always runs a beam search of options.beam_size. In a sampling export,
  serving_default and translate_ids draw with `decoding.source_seeds` (options.seed mixed with a
  fingerprint of each source's tokens): the same text gets the same answer whatever else is in
  its request or its server-side batch, and the evaluation of the run drew the same samples.

  decode="graph" runs the key/value-cached searches as graph-mode `tf.while_loop`s;
  decode="xla" pads the source to a length bucket and runs the padded-cache searches compiled
  with XLA (`jit_compile=True`): one program per (search, bucket, batch size), the same answers.
  Searches that are the same computation share one compiled function (serving_default of a beam
  export is translate_nbest's first beam; `sample` is serving_default with the caller's seeds).

  Args:
    model: the trained `tfattn.Transformer`.
    source_tokenizer, target_tokenizer: the run's in-graph tokenizers (text <-> ids).
    options: the `DecodeOptions` every signature decodes with.
    decode: "graph" or "xla" (see above).
  """

  NBEST_SIGNATURE = "translate_nbest"

  def __init__(
    self, model, source_tokenizer, target_tokenizer, options: DecodeOptions, decode="graph"
  ):
    super().__init__(
      model, source_tokenizer, options, decode, truncate="right", name="seq2seq_export"
    )
    self.target_tokenizer = target_tokenizer

  def _trimmed(self, found, source_ids):
    """Limits come from each example's own length, so columns past the unpadded buffer size are
    padding: trimming them gives exactly the graph mode's output shape."""
    width, _ = self.model.decoding_lengths(source_ids, self.options)
    return found._replace(ids=found.ids[..., :width])

  # --- Signatures ---

  def _answers(self, found: decoding.Hypotheses):
    """{"translation": detokenized text, "score", "log_prob"} of `[batch]` or `[batch, beam]`
    hypotheses."""
    ids = found.ids
    rows = tf.reshape(ids, [-1, tf.shape(ids)[-1]])  # [batch (* beam), length]
    text = tf.reshape(self.target_tokenizer.detokenize(rows), tf.shape(ids)[:-1])
    return {"translation": text, "score": found.scores, "log_prob": found.log_probs}

  @tf.function(input_signature=[TEXT], autograph=False)
  def serve_text(self, text):
    """Raw text `[batch]` -> {"translation": string `[batch]`, "score": float32 `[batch]`,
    "log_prob": float32 `[batch]`}."""
    return self._answers(self._best(self._source_ids(text)))

  @tf.function(input_signature=[TEXT], autograph=False)
  def translate_nbest(self, text):
    """Raw text `[batch]` -> every beam, best first: {"translation": string `[batch, beam]`,
    "score": float32 `[batch, beam]`, "log_prob": float32 `[batch, beam]`}."""
    return self._answers(self._nbest(self._source_ids(text)))

  @tf.function(input_signature=[IDS], autograph=False)
  def translate_ids(self, source_ids):
    """Token ids -> {"ids": int32 `[batch, length]` ending in END, "score": float32 `[batch]`,
    "log_prob": float32 `[batch]`}."""
    found = self._best(
      self._checked_ids(source_ids, self.model.config.source_vocab_size, "source_ids")
    )
    return {"ids": found.ids, "score": found.scores, "log_prob": found.log_probs}

  @tf.function(input_signature=[IDS, TARGET_IDS], autograph=False)
  def score(self, source_ids, target_ids):
    """log p(target_ids | source_ids), teacher-forced; target_ids end with END, 0 = padding.

    Returns {"log_prob": float32 `[batch]`}. Differentiable: the fine-tuning entry point."""
    source_ids = self._checked_ids(source_ids, self.model.config.source_vocab_size, "source_ids")
    target_ids = self._checked_ids(target_ids, self.model.config.target_vocab_size, "target_ids")
    start = tf.fill([tf.shape(target_ids)[0], 1], self.model.config.start_id)
    # START + the targets but the last, as wide as the targets (zero-width targets: an empty
    # decoder input, log_prob 0, as such a row gets in a batch; the shift failed them).
    decoder_input = tf.concat([start, target_ids], axis=1)[:, : tf.shape(target_ids)[1]]
    log_probs = tf.nn.log_softmax(self.model(source_ids, decoder_input))
    token_log_probs = tf.gather(log_probs, target_ids, batch_dims=2)
    mask = tf.cast(tf.not_equal(target_ids, self.model.config.pad_id), tf.float32)
    return {"log_prob": tf.reduce_sum(token_log_probs * mask, axis=1)}

  @tf.function(input_signature=[TEXT], autograph=False)
  def __call__(self, text):
    """Reusable SavedModel entry: `[batch]` text -> `[batch]` translations."""
    return self.serve_text(text)["translation"]

  @tf.function(input_signature=attention_export.SEQ2SEQ_INPUTS, autograph=False)
  def attention(self, text, target, layer):
    """Attention maps: text `[batch]`, target `[batch]` ("" = the model's own translation,
    decoded as serving_default decodes), layer int32 `[batch]` (-1 = every layer) -> pieces and
    weights (`serving/export/attention_export.py` lists the outputs and the size limit)."""
    source_ids = self._source_ids(text)
    given = attention_export.given_targets(self.target_tokenizer, target, self.max_length)
    targets = attention_export.target_ids(source_ids, given, lambda ids: self._best(ids).ids)
    return attention_export.seq2seq_maps(
      self.model, self.source_tokenizer, self.target_tokenizer, source_ids, targets, layer
    )

  def signatures(self):
    signatures = {
      "serving_default": self.serve_text,
      "translate_nbest": self.translate_nbest,
      "translate_ids": self.translate_ids,
      "encode": self.encode,
      "score": self.score,
      "attention": self.attention,
    }
    if self.options.strategy == SAMPLE:
      signatures["sample"] = self.sample
    return signatures


class ClassifierExport(_Exportable):
  """Signatures: serving_default (text -> label, probabilities), classify_ids, encode.

  Args:
    model: the trained `tfattn.EncoderClassifier`.
    source_tokenizer: the run's in-graph tokenizer (text -> ids).
    truncate: which end of a long text is cut ("right" or "left"), as in training.
  """

  def __init__(self, model, source_tokenizer, truncate="right"):
    super().__init__(model, source_tokenizer, truncate, name="classifier_export")

  def _classify(self, source_ids):
    probabilities = tf.nn.softmax(self.model(source_ids))
    return {"label": tf.argmax(probabilities, axis=-1), "probabilities": probabilities}

  @tf.function(input_signature=[TEXT], autograph=False)
  def serve_text(self, text):
    """Raw text `[batch]` -> {"label": int64 `[batch]`, "probabilities": `[batch, classes]`}."""
    return self._classify(self._source_ids(text))

  @tf.function(input_signature=[IDS], autograph=False)
  def classify_ids(self, source_ids):
    """Token ids -> {"label": int64 `[batch]`, "probabilities": `[batch, classes]`}."""
    return self._classify(
      self._checked_ids(source_ids, self.model.config.source_vocab_size, "source_ids")
    )

  @tf.function(input_signature=[TEXT], autograph=False)
  def __call__(self, text):
    """Reusable SavedModel entry: `[batch]` text -> `[batch, classes]` probabilities."""
    return self.serve_text(text)["probabilities"]

  @tf.function(input_signature=attention_export.CLASSIFIER_INPUTS, autograph=False)
  def attention(self, text, layer):
    """Attention maps: text `[batch]`, layer int32 `[batch]` (-1 = every layer) -> pieces,
    self-attention weights, label and probabilities (`serving/export/attention_export.py`)."""
    return attention_export.classifier_maps(
      self.model, self.source_tokenizer, self._source_ids(text), layer
    )

  def signatures(self):
    return {
      "serving_default": self.serve_text,
      "classify_ids": self.classify_ids,
      "encode": self.encode,
      "attention": self.attention,
    }


class LanguageModelExport(_DecodingExport):
  """Signatures: serving_default and `generate` (text, the prompt -> "generation", its
  continuation, with "score" and "log_prob"), `generate_up_to` (text and max_new_tokens, a
  length per row -> the same outputs), generate_nbest (every beam, best first), generate_ids
  (prompt ids -> continuation ids), in an export whose options sample `sample` (text and a seed
  per row) and `sample_up_to` (text, seed and max_new_tokens), `attention` (the causal
  self-attention over BOS + a text) and `score` (texts -> their log-likelihood under the model,
  in total and per token).

  Every signature decodes as `options` say, through the same `decoding.decode` / `nbest` as the
  seq2seq export: a prompt's continuation is at most options.max_decode_length tokens (unset:
  extra_decode_length), or in the `_up_to` signatures its row's max_new_tokens (transformers'
  `max_new_tokens`). Either way a continuation stops at the model's limit, max_length positions
  with the prompt's (a windowed model's too: its ring keeps memory flat, but its positions end
  there). TF Serving signatures have no optional inputs, so the length is its own signatures'
  input, and `generate` keeps its inputs. A prompt keeps its last max_length - 1 pieces. A
  sampling export draws serving_default with the prompt's own seed
  (`decoding.source_seeds`). decode="xla" pads the prompt to a length bucket and runs the
  padded-cache searches compiled (prompts of one batch differ in length anyway: the model
  aligns them itself); the `_up_to` searches are programs of their own.

  Args:
    model: the trained `tfattn.LanguageModel`.
    tokenizer: the run's in-graph tokenizer (text <-> ids).
    options: the `DecodeOptions` every signature decodes with.
    decode: "graph" or "xla" (see above).
  """

  encode = None  # no encoder: the base's `encode` signature does not apply

  NBEST_SIGNATURE = "generate_nbest"

  def __init__(self, model, tokenizer, options: DecodeOptions, decode="graph"):
    # A prompt's pieces: BOS takes one position.
    super().__init__(
      model,
      tokenizer,
      options,
      decode,
      truncate="left",
      name="language_model_export",
      max_length=model.config.max_length - 1,
      up_to_length=model.config.max_length,  # the buffer; each row's own limit cuts it
    )
    if options.strategy == SAMPLE:
      self.sample_up_to = tf.function(
        self._sample, input_signature=[TEXT, SEEDS, NEW_TOKENS], autograph=False
      )

  def _answers(self, found: decoding.Hypotheses):
    ids = found.ids
    rows = tf.reshape(ids, [-1, tf.shape(ids)[-1]])  # [batch (* beam), length]
    text = tf.reshape(self.source_tokenizer.detokenize(rows), tf.shape(ids)[:-1])
    return {"generation": text, "score": found.scores, "log_prob": found.log_probs}

  @tf.function(input_signature=[TEXT], autograph=False)
  def generate(self, text):
    """Prompts `[batch]` -> {"generation": string `[batch]`, "score", "log_prob": float32
    `[batch]`}."""
    return self._answers(self._best(self._source_ids(text)))

  @tf.function(input_signature=[TEXT, NEW_TOKENS], autograph=False)
  def generate_up_to(self, text, max_new_tokens):
    """Prompts `[batch]` and int32 max_new_tokens `[batch]` (each at least 1) -> `generate`'s
    outputs, row i's continuation at most max_new_tokens[i] tokens (and the model's limit)."""
    max_new_tokens = self._checked_new_tokens(max_new_tokens, text)
    return self._answers(self._best(self._source_ids(text), max_new_tokens=max_new_tokens))

  @tf.function(input_signature=[TEXT], autograph=False)
  def generate_nbest(self, text):
    """Prompts `[batch]` -> every beam, best first: {"generation": string `[batch, beam]`,
    "score", "log_prob": float32 `[batch, beam]`}."""
    return self._answers(self._nbest(self._source_ids(text)))

  @tf.function(input_signature=[IDS], autograph=False)
  def generate_ids(self, source_ids):
    """Prompt ids (padding 0) -> {"ids": int32 `[batch, length]` ending in END, "score",
    "log_prob"}."""
    found = self._best(
      self._checked_ids(source_ids, self.model.config.target_vocab_size, "source_ids")
    )
    return {"ids": found.ids, "score": found.scores, "log_prob": found.log_probs}

  @tf.function(input_signature=[TEXT], autograph=False)
  def score(self, text):
    """Texts `[batch]` -> how likely the model finds each, [END] included, as training
    computes its loss (`tfattn.scoring`): {"log_prob": float32 `[batch]`, the sum;
    "token_log_probs": float32 `[batch, length]`, each piece's and then [END]'s, 0 after;
    "tokens": int32 `[batch]`, the pieces and [END] counted}. Mean per token: log_prob / tokens.
    [END]'s term is the model's belief that the text ends there: for a model trained on packed
    blocks, which rarely saw [END], it can dominate a short text's total (docs/language_model.md:
    leave it out with token_log_probs[tokens - 1]).
    A text of more than max_length - 1 pieces fails with InvalidArgument (HTTP 400) instead of
    being scored cut."""
    text = tf.strings.unicode_transcode(text, "UTF-8", "UTF-8", errors="strict")
    tokens = self.source_tokenizer.tokenize(text).to_tensor(default_value=tfattn_text.PAD_ID)
    check = tf.debugging.assert_less_equal(
      tf.shape(tokens)[1],
      self.max_length,
      message=f"a text has more pieces than this model scores at once ({self.max_length}, "
      "max_length - 1): score it in parts",
    )
    with tf.control_dependencies([check]):
      tokens = tf.identity(tokens)
    log_probs, counts = scoring.token_log_likelihoods(self.model, tokens)
    return {
      "log_prob": tf.reduce_sum(log_probs, axis=1),
      "token_log_probs": log_probs,
      "tokens": counts,
    }

  @tf.function(input_signature=[TEXT], autograph=False)
  def __call__(self, text):
    """Reusable SavedModel entry: `[batch]` prompts -> `[batch]` continuations."""
    return self.generate(text)["generation"]

  @tf.function(input_signature=attention_export.CLASSIFIER_INPUTS, autograph=False)
  def attention(self, text, layer):
    """Attention maps: text `[batch]`, layer int32 `[batch]` (-1 = every layer) -> the pieces
    (START, then the text's) and the causal self-attention
    (`serving/export/attention_export.py`)."""
    return attention_export.language_model_maps(
      self.model, self.source_tokenizer, self._source_ids(text), layer
    )

  def warmup_requests(self, texts, compiled_only=False):
    """The base's, and a request of each signature that takes max_new_tokens (with
    `compiled_only`: of its one compiled search; `sample_up_to` shares it)."""
    requests = super().warmup_requests(texts, compiled_only)
    texts = _text_array(texts)
    lengths = np.full([len(texts)], WARMUP_NEW_TOKENS, np.int32)
    requests.append(("generate_up_to", {"text": texts, "max_new_tokens": lengths}))
    if self.options.strategy == SAMPLE and not compiled_only:
      seeds = np.arange(len(texts), dtype=np.int64)
      requests.append(("sample_up_to", {"text": texts, "seed": seeds, "max_new_tokens": lengths}))
    return requests

  def signatures(self):
    signatures = {
      "serving_default": self.generate,
      "generate": self.generate,
      "generate_up_to": self.generate_up_to,
      "generate_nbest": self.generate_nbest,
      "generate_ids": self.generate_ids,
      "attention": self.attention,
      "score": self.score,
    }
    if self.options.strategy == SAMPLE:
      signatures["sample"] = self.sample
      signatures["sample_up_to"] = self.sample_up_to
    return signatures
