"""Held-out metrics. Seq2seq: sacreBLEU (standard settings: 13a tokenization, cased; plus its
lowercased variant) and exact match, both on detokenized text against the raw references, and
teacher-forced token accuracy. Classification: accuracy."""

import unicodedata

import numpy as np
import sacrebleu
import tensorflow as tf

from tfattn import decoding, losses
from tfattn.decode_options import DecodeOptions


def bleu_scores(hypotheses, references):
  """Corpus BLEU of detokenized strings with sacreBLEU's defaults, cased and lowercased.

  Returns {"bleu", "bleu_lowercase", "bleu_signature", "bleu_lowercase_signature"}."""
  scores = {}
  for name, lowercase in (("bleu", False), ("bleu_lowercase", True)):
    metric = sacrebleu.metrics.BLEU(lowercase=lowercase)
    scores[name] = metric.corpus_score(hypotheses, [references]).score
    scores[f"{name}_signature"] = str(metric.get_signature())
  return scores


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


def evaluate_seq2seq(model, dataset, target_tokenizer, max_examples, options: DecodeOptions):
  """Decodes held-out sources as `options` say and compares the detokenized outputs with the
  reference texts ("target_text" in the batches, see `train.data.seq2seq_dataset`)."""
  decode = make_decoder(model, options)
  teacher_forced = tf.function(
    lambda s, t: model(s, t),
    input_signature=[tf.TensorSpec([None, None], tf.int32)] * 2,
    autograph=False,
  )
  correct_tokens = total_tokens = 0.0
  hypotheses, references = [], []
  for batch in dataset:
    if len(hypotheses) >= max_examples:
      break
    batch = _first_rows(batch, max_examples - len(hypotheses))
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
    "examples": len(hypotheses),
    "decode": options.to_dict(),
  }
  metrics.update(bleu_scores(hypotheses, references))
  return metrics


def evaluate_classification(model, dataset, max_examples):
  predict = tf.function(
    lambda ids: tf.argmax(model(ids), -1),
    input_signature=[tf.TensorSpec([None, None], tf.int32)],
    autograph=False,
  )
  correct = seen = 0
  for batch in dataset:
    if seen >= max_examples:
      break
    batch = _first_rows(batch, max_examples - seen)
    predicted = predict(batch["source"]).numpy()
    correct += int(np.sum(predicted == batch["label"].numpy()))
    seen += len(predicted)
  return {"accuracy": correct / max(seen, 1), "examples": seen}
