"""Kinds of task for training: everything that differs between translating and classifying (the
model and vocabularies from `tfattn/kinds.py`, plus the batches, the loss, the evaluation and
the FLOPs of a step) as one object per kind, so the trainer never asks which kind it runs, reads
no batch key and names no tokenizer. `TrainingKind` says what a kind provides; a new kind (say a
decoder-only language model) is one class here, one in `tfattn/kinds.py` and one in
`serving/export/`, each added to its registry.
"""

from types import MappingProxyType
from typing import (
  Any,
  Dict,
  List,
  Mapping,
  NamedTuple,
  Optional,
  Protocol,
  Sequence,
  Tuple,
  runtime_checkable,
)

import numpy as np
import tensorflow as tf
from absl import logging

from tfattn import flops, kinds, losses, scoring, text
from tfattn.decode_options import DecodeOptions
from tfattn.language_model import perplexity_sums_of_logits
from tfattn.special_ids import END_ID, PAD_ID, START_ID
from train import data, evaluation, language_model_data, packing
from train.batching import NO_PACKING, Batching, Packing
from train.flag_choices import TEXT_DOCUMENTS, TEXT_LINES
from train.task import (
  CLASSIFICATION_DEFAULTS,
  LANGUAGE_MODEL_DEFAULTS,
  TSV_SEQ2SEQ_DEFAULTS,
)


class LossSums(NamedTuple):
  """What one batch contributes to a training step, each a float32 scalar.

  Attributes:
    loss: the summed loss over the counted positions.
    correct: counted positions predicted right.
    count: counted positions: target tokens (seq2seq) or examples (classification).
    tokens: tokens the batch holds, for tokens/s (target tokens, or input tokens).
  """

  loss: tf.Tensor
  correct: tf.Tensor
  count: tf.Tensor
  tokens: tf.Tensor


class AttentionMap(NamedTuple):
  """One example's attention in one layer, for a picture.

  Attributes:
    weights: float32 `[heads, queries, keys]`, cut to the example's real pieces.
    keys: the key pieces (x axis), e.g. the source pieces.
    queries: the query pieces (y axis), e.g. the target pieces each row predicts.
    title: what the picture shows.
  """

  weights: np.ndarray
  keys: List[str]
  queries: List[str]
  title: str


def _pieces(tokenizer, ids) -> List[List[str]]:
  """int32 `[batch, length]` -> each row's piece texts, without the padding."""
  lengths = text.row_lengths(ids)
  texts = text.piece_texts(tokenizer, ids, lengths).numpy()
  return [
    [piece.decode("utf-8", "replace") for piece in row[:length]]
    for row, length in zip(texts, lengths.numpy())
  ]


def _self_attention_maps(weights, tokenizer, ids, title, first_piece=()) -> List[AttentionMap]:
  """Each row's self-attention map over its first `MAP_PIECES` pieces (`first_piece` before
  them: the language model's BOS query). weights: `[batch, heads, length, length]`."""
  maps = []
  for i, pieces in enumerate(_pieces(tokenizer, ids)):
    shown = [*first_piece, *pieces][:MAP_PIECES]
    maps.append(AttentionMap(weights[i, :, : len(shown), : len(shown)], shown, shown, title))
  return maps


@runtime_checkable
class TrainingKind(kinds.ModelKind, Protocol):
  """What the trainer needs of a task kind, beyond its model and vocabularies.

  Attributes:
    tsv_defaults: the training settings a `--task=tsv` run of this kind starts from (before
      the recipe's and the declared `when_unset`).
    tsv_columns: TAB-separated fields a TSV line of this kind has: 2 (a source or text, then
      the target or label), or 1 (the whole line is the example's text, TABs included; its
      target is "").
  """

  tsv_defaults: Mapping[str, Any]
  tsv_columns: int

  def dataset(
    self, raw: tf.data.Dataset, tokenizers: Dict, batching: Batching, packing: Packing
  ) -> tf.data.Dataset:
    """Raw examples -> batches (dicts of `[batch, ...]` tensors), batched as `batching` says
    (`batching.training`: shuffled, repeated, equal shards) and packed as `packing` says
    (`train.batching`); a kind ignores what it does not read."""

  def loss_sums(self, model, batch: Dict, smoothing: float) -> LossSums:
    """The batch's loss sums (differentiable)."""

  def batch_shape(self, batch: Dict) -> tf.Tensor:
    """int32 `[3]`: rows, padded source length, padded target length (0 without a target)."""

  def evaluate(
    self,
    model,
    dataset: tf.data.Dataset,
    tokenizers: Dict,
    decoding: Optional[DecodeOptions],
    max_examples: Optional[int],
  ) -> Dict:
    """Metrics on up to `max_examples` examples (None: all), with "examples" judged and
    "partial" (whether the data held more: `evaluation.FirstExamples`); `decoding`: the run's
    decoding options (None for a kind that decodes nothing)."""

  def evaluation_note(self, decoding: Optional[DecodeOptions]) -> str:
    """How evaluation judges, for the log (e.g. " (beam 4)")."""

  def parse_target(self, field: str):
    """A TSV line's second column as this kind's target (a ValueError saying why not)."""

  def count_classes(self, targets: Sequence) -> Optional[int]:
    """The model's `num_classes` for these targets; None where targets are not classes."""

  tsv_target_rule: str  # what `tsv_target_ok` asks of a TSV line's second column, in words

  def tsv_target_ok(self, fields: tf.Tensor) -> tf.Tensor:
    """In-graph `parse_target` check: `[n]` second columns -> bool `[n]`."""

  def tsv_target(self, fields: tf.Tensor) -> tf.Tensor:
    """`[n]` checked second columns -> `[n]` targets (strings, or int64 labels)."""

  def attention_maps(self, model, batch: Dict, tokenizers: Dict) -> List[AttentionMap]:
    """The last layer's attention of each example of an evaluation batch, for TensorBoard."""

  def forward_flops(self, model_config, rows: int, source_length: int, target_length: int) -> float:
    """Matmul FLOPs of one forward pass over a padded batch."""


# Pieces of a classifier's input a TensorBoard picture shows.
MAP_PIECES = 48
# Training pairs whose batches the start of a packed run measures (the real-token share).
SHARE_SAMPLE_PAIRS = 2000


class _TextTargets:
  """A target that is text (any text): the TSV side of the seq2seq and language-model kinds,
  which have no classes."""

  tsv_target_rule = "any text"

  def parse_target(self, field: str) -> str:
    return field

  def tsv_target_ok(self, fields):
    return tf.ones_like(fields, tf.bool)

  def tsv_target(self, fields):
    return fields

  def count_classes(self, targets) -> Optional[int]:
    del targets  # text targets: no classes
    return None


class Seq2Seq(_TextTargets, kinds.Seq2SeqModel):
  """Teacher-forced token loss with label smoothing; decoded as the run's DecodeOptions say;
  sacreBLEU and exact match."""

  tsv_defaults = MappingProxyType(TSV_SEQ2SEQ_DEFAULTS)
  tsv_columns = 2

  def dataset(self, raw, tokenizers, batching, packing=NO_PACKING):
    """Batches of {"source", "target_in", "target_out"} `[batch, length]` int32 (plus
    "target_text" for evaluation); with `packing.pairs` (training only), rows of several pairs
    with their "source_segments" and "target_segments" (`train.packing`), and one log line:
    the row length chosen and the share of real tokens in the first batches, unpacked and
    packed. Sources longer than max_length are cut on the right."""
    pack = packing.pairs and batching.training
    source, target = tokenizers["source"], tokenizers["target"]
    keywords = dict(batching.keywords(), start_id=batching.start_id)
    if pack:
      keywords["pack_row_length"] = data.packed_row_length(raw, source, target, batching.max_length)
      self._log_real_token_share(raw, tokenizers, keywords)
    return data.seq2seq_dataset(
      raw, source, target, keep_text=not batching.training, pack=pack, **keywords
    )

  @staticmethod
  def _log_real_token_share(raw, tokenizers, batching, pairs=SHARE_SAMPLE_PAIRS):
    """Logs the packed row length and the share of real (non-padding) tokens in the batches of
    the first `pairs` training pairs (in file order), batched as training batches them,
    without and with packing (`batching`: `seq2seq_dataset`'s keywords)."""
    sample = dict(batching, shuffle_seed=None, repeat=False, drop_remainder=False)
    shares = [
      packing.real_token_share(
        data.seq2seq_dataset(
          raw.take(pairs), tokenizers["source"], tokenizers["target"], pack=pack, **sample
        )
      )
      for pack in (False, True)
    ]
    (unpacked, _, _), (packed, packed_pairs, rows) = shares
    logging.info(
      "packing: rows of %d tokens a side (of --max_length=%d: the shortest batch length that "
      "holds 99%% of the first pairs whole; the longer ones are packed into rows of "
      "--max_length); real (non-padding) tokens are %.1f%% of the batches' tokens unpacked, "
      "%.1f%% packed, %.2f pairs a row (both sides; the %d pairs that fit --max_length of "
      "the first %d training examples)",
      batching["pack_row_length"],
      batching["max_length"],
      100 * unpacked,
      100 * packed,
      packed_pairs / max(rows, 1),
      packed_pairs,
      pairs,
    )

  def loss_sums(self, model, batch, smoothing) -> LossSums:
    """Packed rows (segment ids in the batch) are computed pair by pair (`tfattn.Transformer`):
    each segment's decoder input starts with START, and the loss sums over real tokens."""
    logits = model(batch["source"], batch["target_in"], training=True, **packing.segments_of(batch))
    token_losses, _ = losses.label_smoothed_cross_entropy(logits, batch["target_out"], smoothing)
    correct, count = losses.masked_accuracy(logits, batch["target_out"])
    return LossSums(tf.reduce_sum(token_losses), correct, count, count)

  def batch_shape(self, batch):
    return tf.stack(
      [tf.shape(batch["source"])[0], tf.shape(batch["source"])[1], tf.shape(batch["target_in"])[1]]
    )

  def evaluate(self, model, dataset, tokenizers, decoding, max_examples):
    return evaluation.evaluate_seq2seq(model, dataset, tokenizers["target"], max_examples, decoding)

  def evaluation_note(self, decoding) -> str:
    options = decoding
    return {"greedy": " (greedy)", "beam": f" (beam {options.beam_size})", "sample": " (sampling)"}[
      options.strategy
    ]

  def attention_maps(self, model, batch, tokenizers) -> List[AttentionMap]:
    """Cross-attention of the reference target (teacher-forced) over the source: row i is the
    query that predicts target piece i (the last row predicts END)."""
    _, weights = model(batch["source"], batch["target_in"], return_attention=True)
    cross = weights.cross[-1].numpy()  # [batch, heads, t_len, s_len]
    sources = _pieces(tokenizers["source"], batch["source"])
    targets = _pieces(tokenizers["target"], batch["target_out"])
    layer = len(weights.cross) - 1
    return [
      AttentionMap(
        cross[i, :, : len(t), : len(s)], s, t, f"cross-attention, layer {layer}, reference target"
      )
      for i, (s, t) in enumerate(zip(sources, targets))
    ]

  def forward_flops(self, model_config, rows, source_length, target_length) -> float:
    return flops.seq2seq_forward_flops(model_config, rows, source_length, target_length)


class Classification(kinds.ClassifierModel):
  """Cross-entropy over the classes; accuracy."""

  tsv_defaults = MappingProxyType(CLASSIFICATION_DEFAULTS)
  tsv_columns = 2

  def dataset(self, raw, tokenizers, batching, packing=NO_PACKING):
    """Batches of {"source": `[batch, length]` int32, "label": `[batch]` int64}; a long text
    is cut at `batching.truncate`'s end. Not packed."""
    return data.classification_dataset(
      raw, tokenizers["source"], truncate=batching.truncate, **batching.keywords()
    )

  def loss_sums(self, model, batch, smoothing) -> LossSums:
    """One counted position, the label, per example; the input tokens are what tokens/s
    counts."""
    logits = model(batch["source"], training=True)[:, tf.newaxis]  # [batch, 1, classes]
    labels = tf.cast(batch["label"], tf.int32)[:, tf.newaxis]  # [batch, 1]
    # pad_id=-1 matches no label, so every example counts.
    token_losses, _ = losses.label_smoothed_cross_entropy(logits, labels, smoothing, pad_id=-1)
    correct, count = losses.masked_accuracy(logits, labels, pad_id=-1)
    tokens = tf.reduce_sum(tf.cast(tf.not_equal(batch["source"], PAD_ID), tf.float32))
    return LossSums(tf.reduce_sum(token_losses), correct, count, tokens)

  def batch_shape(self, batch):
    return tf.concat([tf.shape(batch["source"]), [0]], 0)

  def evaluate(self, model, dataset, tokenizers, decoding, max_examples):
    del tokenizers, decoding  # labels are compared as ids
    return evaluation.evaluate_classification(model, dataset, max_examples)

  def evaluation_note(self, decoding) -> str:
    return ""

  def parse_target(self, field: str) -> int:
    try:
      label = int(field)
    except ValueError:
      raise ValueError(f"label {field!r} is not an integer") from None
    if label < 0:
      raise ValueError(f"label must be >= 0, got {label}")
    return label

  def count_classes(self, targets) -> int:
    return max(max(targets) + 1, 2)

  tsv_target_rule = "the label must be an integer >= 0"

  def tsv_target_ok(self, fields):
    return tf.strings.regex_full_match(tf.strings.strip(fields), r"\+?[0-9]{1,18}")

  def tsv_target(self, fields):
    return tf.strings.to_number(tf.strings.strip(fields), tf.int64)

  def attention_maps(self, model, batch, tokenizers) -> List[AttentionMap]:
    """Self-attention over the input, its first `MAP_PIECES` pieces (a long review's full map
    is unreadable)."""
    _, weights = model(batch["source"], return_attention=True)
    return _self_attention_maps(
      weights.encoder[-1].numpy(),  # [batch, heads, length, length]
      tokenizers["source"],
      batch["source"],
      f"self-attention over the input, layer {len(weights.encoder) - 1}",
    )

  def forward_flops(self, model_config, rows, source_length, target_length) -> float:
    del target_length  # none
    return flops.classifier_forward_flops(model_config, rows, source_length)


class LanguageModeling(_TextTargets, kinds.LanguageModelKind):
  """Next-token cross-entropy over plain text; judged by perplexity on held-out text.

  Packed (`packing` "blocks" or "documents", `--task=text`'s default): the texts are one token
  stream cut into blocks of max_length (input, target) pairs, [END] after each document
  (`train/language_model_data.py`); with "documents" each row carries segment ids, and
  attention and positions restart at each document. Lines ("lines", every other language-model
  task): each (text, anything) example is a row, BOS + the text -> the text + EOS; a text
  longer than max_length - 1 tokens keeps its first ones, and the start says how many are cut."""

  # `--task=text`'s defaults (sizes, schedule, batch; the export generates greedily): a TSV or
  # TFRecord language-model run had none (batch_size None failed the start).
  tsv_defaults = MappingProxyType(LANGUAGE_MODEL_DEFAULTS)
  tsv_columns = 1  # a line is a text (a TFRecord's "text" feature)

  def dataset(self, raw, tokenizers, batching, packing=NO_PACKING):
    """Lines: batches of {"source": int32 `[batch, length]`, the text's tokens}. Packed
    (`packing.text`): {"inputs", "targets"} int32 `[batch, max_length]` (+ "segment_ids" for
    "documents"). A language model starts from its own BOS; a text keeps its beginning."""
    tokenizer, keywords = tokenizers["source"], batching.keywords()
    if packing.text != TEXT_LINES:
      if packing.shuffle_tokens:
        keywords["shuffle_tokens"] = packing.shuffle_tokens
      return language_model_data.packed_dataset(
        raw, tokenizer, segments=packing.text == TEXT_DOCUMENTS, **keywords
      )
    keywords["max_length"] -= 1  # room for BOS (input) and EOS (target)
    language_model_data.report_cut_texts(
      raw.map(lambda text, _: text),
      tokenizer,
      keywords["max_length"],
      "training" if batching.training else "evaluation",
    )
    return data.classification_dataset(
      raw.map(lambda text, _: (text, 0)), tokenizer, truncate="right", **keywords
    )

  @staticmethod
  def inputs_and_targets(batch):
    """(what the model reads, what it predicts), int32 `[batch, length]` each, padded with 0:
    a packed batch's own, or a line batch's (BOS + tokens, tokens + EOS), `[batch, length + 1]`."""
    if language_model_data.TARGETS in batch:
      return batch[language_model_data.INPUTS], batch[language_model_data.TARGETS]
    inputs, targets, _ = scoring.next_token_pairs(batch["source"], START_ID, END_ID, PAD_ID)
    return inputs, targets

  @staticmethod
  def model_options(batch):
    """The model's keyword arguments a batch asks for: a packed "documents" batch's segment ids
    (attention and positions restart at each document)."""
    if language_model_data.SEGMENT_IDS in batch:
      return {"segment_ids": batch[language_model_data.SEGMENT_IDS]}
    return {}

  def loss_sums(self, model, batch, smoothing) -> LossSums:
    inputs, targets = self.inputs_and_targets(batch)
    logits = model(inputs, training=True, **self.model_options(batch))
    token_losses, _ = losses.label_smoothed_cross_entropy(logits, targets, smoothing)
    correct, count = losses.masked_accuracy(logits, targets)
    return LossSums(tf.reduce_sum(token_losses), correct, count, count)

  def batch_shape(self, batch):
    shape = tf.shape(self.inputs_and_targets(batch)[0])
    return tf.stack([shape[0], 0, shape[1]])  # no source; what the model reads

  def evaluate(self, model, dataset, tokenizers, decoding, max_examples):
    """{"perplexity": exp(mean negative log-likelihood per token, EOS included),
    "nats_per_char" and "bits_per_byte" (the same likelihood over the text the targets stand
    for: `evaluation.target_characters`, so tokenizers compare), "token_accuracy", "tokens",
    "characters", "bytes", "examples" (rows: texts, or packed blocks), "partial",
    "real_token_share" (real targets / target slots, padding included)}."""
    del decoding  # judged on token ids
    tokenizer = tokenizers["source"]

    def build(model):
      @tf.function(input_signature=[dataset.element_spec], autograph=False)
      def sums(batch):
        inputs, targets = self.inputs_and_targets(batch)
        logits = model(inputs, **self.model_options(batch))  # once: likelihood and accuracy
        nll, count = perplexity_sums_of_logits(logits, targets)
        characters, utf8_bytes = evaluation.target_characters(tokenizer, targets)
        correct = losses.masked_accuracy(logits, targets)[0]
        slots = tf.cast(tf.size(targets), tf.float32)
        return nll, count, correct, characters, utf8_bytes, slots

      return sums

    # One trace per model, batches' spec and tokenizer: every later evaluation reuses it.
    key = ("sums", evaluation.spec_key(dataset.element_spec), tokenizer)
    sums = evaluation.traced_for(model, key, build)
    totals = np.zeros(6)  # nll, tokens, correct, characters, bytes, target slots
    judged = evaluation.FirstExamples(dataset, max_examples)
    for batch in judged:
      totals += [float(value) for value in sums(batch)]
    nll, tokens, correct, characters, utf8_bytes, slots = totals.tolist()
    return {
      **evaluation.text_metrics(nll, tokens, characters, utf8_bytes),
      "token_accuracy": correct / max(tokens, 1.0),
      "tokens": int(tokens),
      "real_token_share": tokens / max(slots, 1.0),
      **judged.coverage(),
    }

  def evaluation_note(self, decoding) -> str:
    return " (perplexity, nats per character, bits per byte, token accuracy)"

  def attention_maps(self, model, batch, tokenizers) -> List[AttentionMap]:
    """The last layer's causal self-attention over the first `MAP_PIECES` pieces of each row
    (row i: the query that predicts piece i + 1)."""
    inputs, _ = self.inputs_and_targets(batch)
    _, weights = model(inputs, return_attention=True, **self.model_options(batch))
    packed = language_model_data.INPUTS in batch  # its rows show what the model reads
    return _self_attention_maps(
      weights.decoder[-1].numpy(),  # [batch, heads, length, length]
      tokenizers["source"],
      inputs if packed else batch["source"],
      f"causal self-attention, layer {len(weights.decoder) - 1}",
      first_piece=() if packed else ("<s>",),
    )

  def forward_flops(self, model_config, rows, source_length, target_length) -> float:
    del source_length  # the text's length is the target's: BOS + tokens
    return flops.language_model_forward_flops(model_config, rows, target_length)


TRAINING_KINDS = {kind.name: kind for kind in (Seq2Seq(), Classification(), LanguageModeling())}


def of(task) -> TrainingKind:
  """The kind object of a task (or of a kind name)."""
  return kinds.lookup(task if isinstance(task, str) else task.kind, TRAINING_KINDS)


def step_training_flops(
  kind: TrainingKind, model_config, shapes: Sequence[Tuple[int, int, int]]
) -> float:
  """Training FLOPs of one optimizer step from its micro-batches' padded shapes
  [(rows, source_length, target_length)] (target_length 0 for classification)."""
  return flops.training_flops(sum(kind.forward_flops(model_config, *shape) for shape in shapes))
