"""Held-out metrics. Seq2seq: sacreBLEU (standard settings: 13a tokenization, cased; plus its
lowercased variant) and exact match, both on detokenized text against the raw references, and
teacher-forced token accuracy. Classification: accuracy. Language model: the characters and
bytes its targets stand for (nats per character, bits per byte). Every kind judges up to a
number of examples (`FirstExamples`) and says whether that left some out."""

import math
import sys
import unicodedata
import weakref
from typing import Callable, Dict, Hashable, Optional

import numpy as np
import sacrebleu
import tensorflow as tf

from tfattn import decoding, losses
from tfattn.decode_options import DecodeOptions
from tfattn.special_ids import END_ID, PAD_ID, UNK_ID


def bleu_scores(hypotheses, references):
  """Corpus BLEU of detokenized strings with sacreBLEU's defaults, cased and lowercased.

  Returns {"bleu", "bleu_lowercase", "bleu_signature", "bleu_lowercase_signature"}."""
  scores = {}
  for name, lowercase in (("bleu", False), ("bleu_lowercase", True)):
    metric = sacrebleu.metrics.BLEU(lowercase=lowercase)
    scores[name] = metric.corpus_score(hypotheses, [references]).score
    scores[f"{name}_signature"] = str(metric.get_signature())
  return scores


# Each model's evaluation functions, traced once and kept while the model lives: a run evaluates
# every --eval_every steps, and a tf.function built per evaluation traces again each time. The
# functions see the model through a weak proxy, so this cache keeps no model alive.
_TRACED = weakref.WeakKeyDictionary()  # model -> {key: tf.function}


def traced_for(model, key: Hashable, build: Callable):
  """The tf.function `build(model)` makes, built on the first call for `model` and `key` and
  reused while the model lives. `key` names everything else the function depends on (what it
  computes, decoding options, the batches' element spec, a tokenizer it captures); the model's
  weights are read when the function runs, so they may change between calls."""
  functions = _TRACED.setdefault(model, {})
  if key not in functions:
    functions[key] = build(weakref.proxy(model))
  return functions[key]


def traced_functions(model) -> Dict:
  """{key: tf.function} of the evaluation functions cached for `model`."""
  return dict(_TRACED.get(model, {}))


def spec_key(element_spec) -> Hashable:
  """A dataset's element spec (a dict of `tf.TensorSpec`) as a cache key."""
  return tuple(sorted(element_spec.items()))


def make_decoder(model, options: DecodeOptions):
  """int32 source ids `[batch, length]` -> best int32 output ids `[batch, out_length]`, decoded
  as `options` say, as the export's serving_default decodes them: a sample draws with the seed
  the export gives that source (`decoding.source_seeds`), so evaluation judges the very outputs
  that are served, whatever the batches."""

  def decode(source):
    return decoding.decode(
      model, source, options, seeds=decoding.source_seeds(source, options, model.config.pad_id)
    ).ids

  return tf.function(
    decode, input_signature=[tf.TensorSpec([None, None], tf.int32)], autograph=False
  )


def _first_rows(batch, count):
  """The first `count` examples of a batch (a dict of [batch, ...] tensors): evaluations judge
  exactly the number of examples asked for, not whole batches."""
  return {key: value[:count] for key, value in batch.items()}


class FirstExamples:
  """The batches of `dataset` up to `max_examples` examples (None: all of them), the last one
  cut to fit. Once iterated, `seen` is the number of examples judged and `partial` says whether
  the data held more (found by reading one batch past the limit, never the whole rest).

  Args:
    dataset: batches, dicts of `[batch, ...]` tensors.
    max_examples: the most examples to yield; None: every one.
  """

  def __init__(self, dataset: tf.data.Dataset, max_examples: Optional[int]):
    self.dataset = dataset
    self.limit = sys.maxsize if max_examples is None else max_examples
    self.seen, self.partial = 0, False

  def __iter__(self):
    self.seen, self.partial = 0, False
    for batch in self.dataset:
      rows = int(tf.shape(next(iter(batch.values())))[0])
      if self.seen >= self.limit:
        self.partial = True  # a batch past the limit: the data held more
        return
      if self.seen + rows > self.limit:
        self.partial = True
        rows = self.limit - self.seen
        batch = _first_rows(batch, rows)
      self.seen += rows
      yield batch

  def coverage(self) -> Dict:
    """{"examples": judged, "partial": whether examples were left out}, for the metrics."""
    return {"examples": self.seen, "partial": self.partial}


def coverage_note(metrics: Dict) -> str:
  """ " (partial: the first N examples)" for metrics that left examples out, else ""."""
  if not metrics.get("partial"):
    return ""
  return f" (partial: the first {metrics.get('examples')} examples)"


def shown_metric(name: str, value) -> bool:
  """Whether a metric goes into a log line (not the decoding options, sacreBLEU's signatures
  or the partial flag, which the line's label says in words: `coverage_note`)."""
  return not isinstance(value, dict) and not name.endswith("_signature") and name != "partial"


def target_characters(tokenizer, targets):
  """The text a language model's targets stand for, measured in characters and UTF-8 bytes:
  the denominators of nats per character and bits per byte, for any tokenizer.

  Each row is cut into documents at its [END]s (one row may hold several: packed blocks) and
  each document is detokenized on its own; every [END] counts as one character and one byte,
  the newline it stands for. PAD and START count nothing, and an [UNK] counts one character and
  one byte (what it replaced is unknown). A document cut by a row boundary counts as two pieces,
  which add up to the whole for tokenizers whose text is the concatenation of their pieces
  (SentencePiece; WordPiece joins words with spaces, so its counts are approximate).

  Args:
    tokenizer: has `detokenize` (int32 `[rows, length]` -> `[rows]` strings, stopping at END).
    targets: int32 `[batch, length]`, padded with PAD.
  Returns:
    (characters, bytes): float32 scalars.
  """
  is_end = tf.equal(targets, END_ID)
  is_unknown = tf.equal(targets, UNK_ID)
  visible = targets > UNK_ID  # the pieces that detokenize to their own text
  # Document k of row r holds the tokens after r's k-th END; numbered across the batch.
  document = tf.cumsum(tf.cast(is_end, tf.int32), axis=1, exclusive=True)  # [batch, length]
  # [batch]; max over no columns is the lowest int32, hence the floor.
  documents = tf.maximum(tf.reduce_max(document, axis=1), 0) + 1
  first = tf.cumsum(documents, exclusive=True)  # [batch]: each row's first document's number
  numbered = document + first[:, tf.newaxis]
  ids = tf.RaggedTensor.from_value_rowids(
    tf.boolean_mask(targets, visible),
    tf.boolean_mask(numbered, visible),
    nrows=tf.reduce_sum(documents),
  ).to_tensor(default_value=PAD_ID)  # [documents, longest]
  texts = tokenizer.detokenize(ids)
  # A padding row with no document pieces detokenizes to "": it adds nothing.
  stand_ins = tf.reduce_sum(tf.cast(is_end, tf.float32)) + tf.reduce_sum(
    tf.cast(is_unknown, tf.float32)
  )
  characters = tf.reduce_sum(tf.cast(tf.strings.length(texts, unit="UTF8_CHAR"), tf.float32))
  utf8_bytes = tf.reduce_sum(tf.cast(tf.strings.length(texts), tf.float32))
  return characters + stand_ins, utf8_bytes + stand_ins


def text_metrics(nll: float, tokens: float, characters: float, utf8_bytes: float) -> Dict:
  """A language model's likelihood in units that compare across tokenizers:
  {"perplexity" (per token), "nats_per_char", "bits_per_byte", "characters", "bytes"}."""
  return {
    "perplexity": math.exp(nll / max(tokens, 1.0)),
    "nats_per_char": nll / max(characters, 1.0),
    "bits_per_byte": nll / math.log(2.0) / max(utf8_bytes, 1.0),
    "characters": int(characters),
    "bytes": int(utf8_bytes),
  }


def evaluate_seq2seq(model, dataset, target_tokenizer, max_examples, options: DecodeOptions):
  """Decodes held-out sources (up to `max_examples`, None: all) as `options` say and compares
  the detokenized outputs with the reference texts ("target_text" in the batches, see
  `train.data.seq2seq_dataset`)."""
  decode = traced_for(model, ("decode", options), lambda m: make_decoder(m, options))
  teacher_forced = traced_for(
    model,
    "teacher_forced",
    lambda m: tf.function(
      lambda s, t: m(s, t),
      input_signature=[tf.TensorSpec([None, None], tf.int32)] * 2,
      autograph=False,
    ),
  )
  correct_tokens = total_tokens = 0.0
  hypotheses, references = [], []
  judged = FirstExamples(dataset, max_examples)
  for batch in judged:
    predicted = decode(batch["source"])
    hypotheses += [s.decode() for s in target_tokenizer.detokenize(predicted).numpy()]
    # The tokenizers normalize to NFKC: so do the references.
    references += [unicodedata.normalize("NFKC", s.decode()) for s in batch["target_text"].numpy()]
    correct, count = losses.masked_accuracy(
      teacher_forced(batch["source"], batch["target_in"]), batch["target_out"]
    )
    correct_tokens += float(correct)
    total_tokens += float(count)
  exact = sum(h == r for h, r in zip(hypotheses, references))
  metrics = {
    "exact_match": exact / max(len(hypotheses), 1),
    "token_accuracy": correct_tokens / max(total_tokens, 1.0),
    **judged.coverage(),
    "decode": options.to_dict(),
  }
  metrics.update(bleu_scores(hypotheses, references))
  return metrics


def evaluate_classification(model, dataset, max_examples):
  """Accuracy on up to `max_examples` examples (None: all)."""
  predict = traced_for(
    model,
    "predict",
    lambda m: tf.function(
      lambda ids: tf.argmax(m(ids), -1),
      input_signature=[tf.TensorSpec([None, None], tf.int32)],
      autograph=False,
    ),
  )
  correct = 0
  judged = FirstExamples(dataset, max_examples)
  for batch in judged:
    predicted = predict(batch["source"]).numpy()
    correct += int(np.sum(predicted == batch["label"].numpy()))
  return {"accuracy": correct / max(judged.seen, 1), **judged.coverage()}
