"""Kinds of model, by the name a run directory records (`task.json`'s "kind"). `ModelKind` is what
every layer's kind object provides: the model it builds and its vocabularies. The training
program extends it with batches, loss and evaluation (`train/kinds.py`: `TrainingKind`), the
export with its serving module (`serving/export/`: `ExportKind`); each layer keeps a registry
by name, and a test checks that the three registries hold the same kinds. Nothing tests a
kind's name.

This module imports no TensorFlow (the models do, when one is built): the training program
reads the kind names while it parses its flags, before TensorFlow loads.
"""

from types import MappingProxyType
from typing import TYPE_CHECKING, Dict, Mapping, Protocol, Tuple, runtime_checkable

from tfattn.config import TransformerConfig

if TYPE_CHECKING:
  import tensorflow as tf

SEQ2SEQ, CLASSIFICATION, LANGUAGE_MODEL = "seq2seq", "classification", "language_model"
# Which way a validation metric improves (`best_by`).
HIGHER, LOWER = "higher", "lower"


@runtime_checkable
class ModelKind(Protocol):
  """What a task kind's model is.

  Attributes:
    name: the kind's name, recorded in a run's `task.json`.
    vocabulary_sides: one vocabulary per side ("source", "target"), learned from the first,
      second, ... element of a training example.
    example_features: a training example's fields as a TFRecord's tf.train.Example holds
      them: (name, dtype name), in the order of the example's elements.
    best_by: {validation metric: HIGHER or LOWER}, the metrics a run may keep its best
      checkpoint by (`--keep_best_by`) and which way each improves.
    shares_vocabulary: whether its two sides may learn one vocabulary and share one embedding
      table (`--shared_vocabulary`).
    model_description: what the model is, in a sentence's words ("a classifier").
    decodes: whether the model generates text, so that the decoding options (`DecodeOptions`)
      apply to it.
    truncates: whether a long input keeps the end `--truncate` names (else the kind keeps
      its own end, and the setting means nothing to it).
    packs_pairs: whether several of its (source, target) pairs may share one row, masked apart
      by segment ids (`--pack_examples`).
  """

  name: str
  vocabulary_sides: Tuple[str, ...]
  example_features: Tuple[Tuple[str, str], ...]
  best_by: Mapping[str, str]
  shares_vocabulary: bool
  model_description: str
  decodes: bool
  truncates: bool
  packs_pairs: bool

  def build_model(self, config: TransformerConfig) -> "tf.Module":
    """A new model of this kind with every variable created."""

  def vocab_sizes(self, sizes: Dict[str, int]) -> Dict[str, int]:
    """{side: vocabulary size} -> the TransformerConfig vocabulary fields."""

  def attention_layers(self, config: TransformerConfig) -> Dict[str, int]:
    """{attention map ("encoder", "decoder", "cross"): how many layers have it}: what the
    export's `attention` signature returns, and what the attention-picture tool may ask."""


class Seq2SeqModel:
  """Source text -> target text with an encoder-decoder `Transformer`."""

  name = SEQ2SEQ
  model_description = "a translation model"
  vocabulary_sides: Tuple[str, ...] = ("source", "target")
  example_features = (("source", "string"), ("target", "string"))
  best_by: Mapping[str, str] = MappingProxyType(
    {
      "bleu": HIGHER,
      "bleu_lowercase": HIGHER,
      "exact_match": HIGHER,
      "token_accuracy": HIGHER,
    }
  )
  shares_vocabulary = True
  decodes, truncates = True, False  # a source longer than max_length keeps its beginning
  packs_pairs = True

  def build_model(self, config: TransformerConfig) -> "tf.Module":
    from tfattn.transformer import Transformer

    return Transformer(config)

  def vocab_sizes(self, sizes: Dict[str, int]) -> Dict[str, int]:
    return dict(source_vocab_size=sizes["source"], target_vocab_size=sizes["target"])

  def attention_layers(self, config: TransformerConfig) -> Dict[str, int]:
    decoder = config.num_decoder_layers
    return {"encoder": config.num_encoder_layers, "decoder": decoder, "cross": decoder}


class ClassifierModel:
  """Text -> one of `num_classes` labels with an `EncoderClassifier`."""

  name = CLASSIFICATION
  model_description = "a classifier"
  vocabulary_sides: Tuple[str, ...] = ("source",)
  example_features = (("text", "string"), ("label", "int64"))
  best_by: Mapping[str, str] = MappingProxyType({"accuracy": HIGHER})
  shares_vocabulary = False
  decodes, truncates = False, True
  packs_pairs = False

  def build_model(self, config: TransformerConfig) -> "tf.Module":
    from tfattn.transformer import EncoderClassifier

    return EncoderClassifier(config)

  def vocab_sizes(self, sizes: Dict[str, int]) -> Dict[str, int]:
    # No decoder: the target size only has to be a valid config value.
    return dict(source_vocab_size=sizes["source"], target_vocab_size=sizes["source"])

  def attention_layers(self, config: TransformerConfig) -> Dict[str, int]:
    # A Transformer body has one self-attention map a layer; the other bodies pool with one.
    transformer_body = config.classifier_body == "transformer"
    return {"encoder": config.num_encoder_layers if transformer_body else 1}


class LanguageModelKind:
  """Text -> its continuation with a decoder-only `LanguageModel` (one vocabulary)."""

  name = LANGUAGE_MODEL
  model_description = "a language model"
  vocabulary_sides: Tuple[str, ...] = ("source",)
  example_features = (("text", "string"),)  # a text alone; the pair's second element is ""
  # Per token, and per character / byte of the text (these compare across tokenizers).
  best_by: Mapping[str, str] = MappingProxyType(
    {"token_accuracy": HIGHER, "perplexity": LOWER, "nats_per_char": LOWER, "bits_per_byte": LOWER}
  )
  shares_vocabulary = False
  decodes, truncates = True, False  # a training text keeps its beginning, a prompt its end
  packs_pairs = False  # its text packs its own way: --text_packing

  def build_model(self, config: TransformerConfig) -> "tf.Module":
    from tfattn.language_model import LanguageModel

    return LanguageModel(config)

  def vocab_sizes(self, sizes: Dict[str, int]) -> Dict[str, int]:
    return dict(source_vocab_size=sizes["source"], target_vocab_size=sizes["source"])

  def attention_layers(self, config: TransformerConfig) -> Dict[str, int]:
    return {"decoder": config.num_decoder_layers}


MODEL_KINDS = {kind.name: kind for kind in (Seq2SeqModel(), ClassifierModel(), LanguageModelKind())}


def lookup(name: str, registry: dict):
  """`registry[name]`, or a ValueError naming the known kinds."""
  if name not in registry:
    raise ValueError(f"unknown task kind {name!r}; known: {sorted(registry)}")
  return registry[name]
