"""The model section: a preset, resized, and every setting that refers to `TransformerConfig`'s
own declaration (`model_setting`): its bounds, choices and defaults are not restated here."""

import dataclasses
from typing import Optional

import settings
from tfattn.config import PRESETS, TransformerConfig
from train.sections.declare import MUST_MATCH, model_setting, run_setting

# Model sizes an explicit --model preset keeps (the recipe's and task's are not applied).
MODEL_SIZE_FIELDS = ("d_model", "num_heads", "dff", "num_layers")


@dataclasses.dataclass(frozen=True)
class Model:
  """The model section."""

  preset: Optional[str] = run_setting(
    None, "Model size preset.", choices=tuple(PRESETS), flag="model", resume=MUST_MATCH
  )
  d_model: Optional[int] = model_setting("d_model", resume=MUST_MATCH)
  num_heads: Optional[int] = model_setting("num_heads", resume=MUST_MATCH)
  dff: Optional[int] = model_setting("dff", resume=MUST_MATCH)
  num_layers: Optional[int] = model_setting(
    "num_encoder_layers",
    "Encoder and decoder layers each.",
    to=("num_encoder_layers", "num_decoder_layers"),
    resume=MUST_MATCH,
  )
  max_length: Optional[int] = model_setting("max_length", resume=MUST_MATCH)
  norm_position: Optional[str] = model_setting("norm_position", resume=MUST_MATCH)
  classifier_body: Optional[str] = model_setting("classifier_body", resume=MUST_MATCH)
  attention_window: Optional[int] = model_setting(
    "attention_window", unset="full attention", resume=MUST_MATCH
  )
  dropout: Optional[float] = model_setting("dropout_rate", resume=MUST_MATCH)
  attention_dropout: Optional[float] = model_setting(
    "attention_dropout_rate",
    when_missing=0.0,  # saved before the field existed: attention weights were never dropped
    resume=MUST_MATCH,
  )
  feed_forward_dropout: Optional[float] = model_setting(
    "feed_forward_dropout_rate",
    # Saved before the field existed: the feed-forward hidden layer dropped at `dropout`.
    when_missing=lambda saved: saved.get("dropout"),
    resume=MUST_MATCH,
  )
  # Choices of today's practice (issue 41): positions, activation, the embeddings'
  # initialisation.
  position_encoding: Optional[str] = model_setting("position_encoding", resume=MUST_MATCH)
  activation: Optional[str] = model_setting("activation", resume=MUST_MATCH)
  embedding_init: Optional[str] = model_setting("embedding_init", resume=MUST_MATCH)
  # What a Marian / OPUS-MT model differs in (issue 50), usable from scratch too.
  sinusoid_layout: Optional[str] = model_setting("sinusoid_layout", resume=MUST_MATCH)
  output_bias: Optional[bool] = model_setting("output_bias", resume=MUST_MATCH)
  layer_norm_epsilon: Optional[float] = model_setting("layer_norm_epsilon", resume=MUST_MATCH)
  decoder_start_id: Optional[int] = model_setting("decoder_start_id", resume=MUST_MATCH)
  # Fine-tuning (issue 50): another run's weights.
  init_from: Optional[str] = run_setting(
    None,
    "Start from another run's final weights (a training run directory, or one that "
    "`python -m train.import_marian` wrote): its model configuration and vocabularies become "
    "this run's, while the optimizer, the learning-rate schedule and the step counter start "
    "anew. The model-size flags are then not used.",
    unset="off",
    resume=MUST_MATCH,
  )

  def config(self, source_vocab_size: int, target_vocab_size: int, num_classes: int, **run):
    """The `TransformerConfig` of this section for the given vocabularies: the preset, then
    every set setting that refers to the model's, then `run` (what the run decides in its own
    terms: seed, precision, one shared table)."""
    return TransformerConfig.preset(
      self.preset,
      **settings.referred(self),
      source_vocab_size=source_vocab_size,
      target_vocab_size=target_vocab_size,
      num_classes=num_classes,
      **run,
    )
