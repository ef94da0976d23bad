"""Shared fixtures: quiet TensorFlow, the repo on sys.path, small models."""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

import tfattn  # noqa: E402


@pytest.fixture
def tiny_config():
  return tfattn.TransformerConfig.preset("tiny", source_vocab_size=40, target_vocab_size=40,
                                         max_length=64)


@pytest.fixture
def tiny_model(tiny_config):
  return tfattn.Transformer(tiny_config)


def random_ids(batch, length, vocab, seed, low=3):
  """Ids in [low, vocab): no padding, BOS or EOS."""
  return tf.random.stateless_uniform([batch, length], [seed, 1], low, vocab, tf.int32)
