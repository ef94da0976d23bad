"""Kinds of model, by the name a run directory records (`task.json`'s "kind"): which model a kind
builds and which vocabularies it has. The training program adds batches, loss and evaluation
(`train/kinds.py`), the export adds its serving module (`serving/export.py`); neither tests a
kind's name.
"""

from typing import Tuple

import tensorflow as tf

from tfattn.config import TransformerConfig
from tfattn.transformer import EncoderClassifier, Transformer

SEQ2SEQ, CLASSIFICATION = "seq2seq", "classification"


class Seq2SeqModel:
  """Source text -> target text with an encoder-decoder `Transformer`."""

  name = SEQ2SEQ
  # One vocabulary per side, learned from the first and second element of an example.
  vocabulary_sides: Tuple[str, ...] = ("source", "target")

  def build_model(self, config: TransformerConfig) -> tf.Module:
    return Transformer(config)


class ClassifierModel:
  """Text -> one of `num_classes` labels with an `EncoderClassifier`."""

  name = CLASSIFICATION
  vocabulary_sides: Tuple[str, ...] = ("source",)

  def build_model(self, config: TransformerConfig) -> tf.Module:
    return EncoderClassifier(config)


def lookup(name: str, registry: dict):
  """`registry[name]`, or a ValueError naming the known kinds."""
  if name not in registry:
    raise ValueError(f"unknown task kind {name!r}; known: {sorted(registry)}")
  return registry[name]
