"""TransformerConfig: presets, validation, JSON round-trip."""

import pytest

from tfattn import PRESETS, TransformerConfig


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_round_trip_through_json(name):
  config = TransformerConfig.preset(name)
  assert TransformerConfig.from_json(config.to_json()) == config


def test_big_preset_matches_the_paper():
  big = TransformerConfig.preset("big")
  assert (big.d_model, big.num_heads, big.dff, big.dropout_rate) == (1024, 16, 4096, 0.3)


@pytest.mark.parametrize(
  "bad,message",
  [
    (dict(d_model=30, num_heads=4), "divisible"),
    (dict(norm_position="middle"), "norm_position"),
    (dict(compute_dtype="int8"), "compute_dtype"),
    (dict(dropout_rate=1.0), "dropout_rate"),
    (dict(share_embeddings=True, target_vocab_size=10), "share_embeddings"),
  ],
)
def test_invalid_configs_name_the_problem(bad, message):
  with pytest.raises(ValueError, match=message):
    TransformerConfig(**bad)


def test_unknown_json_field_and_preset_are_rejected():
  with pytest.raises(ValueError, match="Unknown TransformerConfig fields"):
    TransformerConfig.from_json('{"d_modle": 4}')
  with pytest.raises(ValueError, match="Unknown preset"):
    TransformerConfig.preset("huge")


def test_a_transformer_without_decoder_layers_is_refused_where_it_is_built():
  import tfattn

  config = tfattn.TransformerConfig.preset("tiny", num_decoder_layers=0)
  with pytest.raises(ValueError, match="num_decoder_layers >= 1"):
    tfattn.Transformer(config)
  tfattn.EncoderClassifier(config)  # the classifier has no decoder: fine


def test_every_field_is_a_declared_setting_checked_on_creation():
  import settings

  declared = {field.name for field, _ in settings.declared(TransformerConfig)}
  assert declared == set(TransformerConfig.__dataclass_fields__)
  with pytest.raises(ValueError, match="pooling must be one of"):
    TransformerConfig(pooling="max")
  with pytest.raises(ValueError, match="num_heads must be positive, got 0"):
    TransformerConfig(num_heads=0)


def test_a_config_saved_before_later_fields_takes_what_their_declarations_say_it_meant():
  """The fixture run's model_config.json without the fields added after the first runs: each
  is filled from its declaration, not by a migration written for it."""
  import json
  import os

  import settings

  path = os.path.join(
    os.path.dirname(__file__), "..", "fixtures", "fda25e5", "run_seq2seq", "model_config.json"
  )
  with open(path) as f:
    saved = json.load(f)
  later = {
    field.name: spec.when_missing
    for field, spec in settings.declared(TransformerConfig)
    if spec.when_missing is not None
  }
  assert {"attention_dropout_rate", "feed_forward_dropout_rate", "classifier_body"} <= set(later)
  older = {name: value for name, value in saved.items() if name not in later}
  config = TransformerConfig.from_json(json.dumps(older))
  assert config == TransformerConfig.from_json(json.dumps(saved))
  assert all(getattr(config, name) == value for name, value in later.items())
  assert config.d_model == saved["d_model"] == 32
