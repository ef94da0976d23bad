"""Held-out metrics: exact match, token accuracy, BLEU (seq2seq); accuracy (classification)."""

import numpy as np
import sacrebleu
import tensorflow as tf

from tfattn import decoding, losses
from train.tokenizer import END_ID


def _until_end(row):
  """Token ids up to and including the first END (all of them if none); no padding."""
  row = [int(t) for t in row if t != 0]
  return row[:row.index(END_ID) + 1] if END_ID in row else row


def evaluate_seq2seq(model, dataset, target_tokenizer, max_examples, bleu=False):
  """Greedy-decodes held-out sources and compares with the references."""
  greedy = tf.function(lambda source: decoding.greedy_decode(model, source,
                                                             extra_decode_length=10)[0],
                       input_signature=[tf.TensorSpec([None, None], tf.int32)])
  teacher_forced = tf.function(lambda s, t: model(s, t),
                               input_signature=[tf.TensorSpec([None, None], tf.int32)] * 2)
  exact = seen = 0
  correct_tokens = total_tokens = 0.0
  hypotheses, references = [], []
  for batch in dataset:
    if seen >= max_examples:
      break
    predicted = greedy(batch["source"]).numpy()
    for prediction, reference in zip(predicted, batch["target_out"].numpy()):
      exact += _until_end(prediction) == _until_end(reference)
    correct, count = losses.masked_accuracy(teacher_forced(batch["source"], batch["target_in"]),
                                            batch["target_out"])
    correct_tokens += float(correct)
    total_tokens += float(count)
    seen += len(predicted)
    if bleu:
      hypotheses += [s.decode() for s in target_tokenizer.detokenize(predicted).numpy()]
      references += [s.decode() for s in
                     target_tokenizer.detokenize(batch["target_out"]).numpy()]
  metrics = {"exact_match": exact / max(seen, 1),
             "token_accuracy": correct_tokens / max(total_tokens, 1.0), "examples": seen}
  if bleu:
    metrics["bleu"] = sacrebleu.corpus_bleu(hypotheses, [references]).score
  return metrics


def evaluate_classification(model, dataset, max_examples):
  predict = tf.function(lambda ids: tf.argmax(model(ids), -1),
                        input_signature=[tf.TensorSpec([None, None], tf.int32)])
  correct = seen = 0
  for batch in dataset:
    if seen >= max_examples:
      break
    predicted = predict(batch["source"]).numpy()
    correct += int(np.sum(predicted == batch["label"].numpy()))
    seen += len(predicted)
  return {"accuracy": correct / max(seen, 1), "examples": seen}
