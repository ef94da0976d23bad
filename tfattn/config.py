"""`TransformerConfig`: every hyper-parameter of a tfattn model, frozen and JSON-serialisable."""

import dataclasses
import json

from tfattn import special_ids

_NORM_POSITIONS = ("post", "pre")
_POSITION_KINDS = ("sinusoidal", "learned")
_COMPUTE_DTYPES = ("float32", "float16", "bfloat16")
_POOLINGS = ("mean", "first")
_CLASSIFIER_BODIES = ("transformer", "attention")


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
  """Architecture of a Transformer (Vaswani et al., 2017) and of the encoder classifier.

  Token ids 0/1/2 are reserved for padding / start-of-sequence / end-of-sequence by default.
  """

  source_vocab_size: int = 8000
  target_vocab_size: int = 8000
  d_model: int = 512
  num_heads: int = 8
  dff: int = 2048
  num_encoder_layers: int = 6
  num_decoder_layers: int = 6
  # The paper's residual dropout: each sublayer's output and the embeddings + positions.
  dropout_rate: float = 0.1
  attention_dropout_rate: float = 0.0
  # Dropout on the feed-forward hidden layer: not in the paper (tensor2tensor's relu_dropout).
  feed_forward_dropout_rate: float = 0.0
  max_length: int = 512  # learned positions and the decoding length limit
  position_encoding: str = "sinusoidal"
  norm_position: str = "post"  # "post" as in the paper; "pre" trains deeper models stably
  share_embeddings: bool = False  # source and target share one embedding table
  tie_output_embedding: bool = True  # target embedding doubles as the pre-softmax weights
  layer_norm_epsilon: float = 1e-6
  compute_dtype: str = "float32"  # variables stay float32; "float16"/"bfloat16" = mixed precision
  pad_id: int = special_ids.PAD_ID
  bos_id: int = special_ids.START_ID
  eos_id: int = special_ids.END_ID
  num_classes: int = 2  # EncoderClassifier only
  pooling: str = "mean"  # EncoderClassifier only: masked mean or first token
  # EncoderClassifier only: "transformer" = the encoder stack; "attention" = one merged-head
  # self-attention over embeddings + positions, no residual, norm or feed-forward (the
  # single-layer experiment of Su Jianlin's write-up); dropout_rate then applies after pooling.
  classifier_body: str = "transformer"
  seed: int = 0  # initialisers and dropout

  def __post_init__(self):
    def require(condition, message):
      if not condition:
        raise ValueError(f"Invalid TransformerConfig: {message}")

    require(self.d_model > 0 and self.num_heads > 0, "d_model and num_heads must be positive")
    require(
      self.d_model % self.num_heads == 0,
      f"d_model ({self.d_model}) must be divisible by num_heads ({self.num_heads})",
    )
    require(self.dff > 0, "dff must be positive")
    require(
      self.num_encoder_layers >= 0 and self.num_decoder_layers >= 0, "layer counts must be >= 0"
    )
    require(0.0 <= self.dropout_rate < 1.0, "dropout_rate must be in [0, 1)")
    require(0.0 <= self.attention_dropout_rate < 1.0, "attention_dropout_rate must be in [0, 1)")
    require(
      0.0 <= self.feed_forward_dropout_rate < 1.0, "feed_forward_dropout_rate must be in [0, 1)"
    )
    require(
      self.position_encoding in _POSITION_KINDS,
      f"position_encoding must be one of {_POSITION_KINDS}",
    )
    require(
      self.norm_position in _NORM_POSITIONS, f"norm_position must be one of {_NORM_POSITIONS}"
    )
    require(
      self.compute_dtype in _COMPUTE_DTYPES, f"compute_dtype must be one of {_COMPUTE_DTYPES}"
    )
    require(self.pooling in _POOLINGS, f"pooling must be one of {_POOLINGS}")
    require(
      self.classifier_body in _CLASSIFIER_BODIES,
      f"classifier_body must be one of {_CLASSIFIER_BODIES}",
    )
    require(
      self.source_vocab_size > max(self.pad_id, self.bos_id, self.eos_id),
      "source_vocab_size must include the special token ids",
    )
    require(
      self.target_vocab_size > max(self.pad_id, self.bos_id, self.eos_id),
      "target_vocab_size must include the special token ids",
    )
    require(
      not self.share_embeddings or self.source_vocab_size == self.target_vocab_size,
      "share_embeddings needs source_vocab_size == target_vocab_size",
    )
    require(self.max_length > 0, "max_length must be positive")
    require(self.num_classes >= 2, "num_classes must be >= 2")

  @property
  def depth(self) -> int:
    """Size of one attention head."""
    return self.d_model // self.num_heads

  def replace(self, **changes) -> "TransformerConfig":
    return dataclasses.replace(self, **changes)

  def to_json(self) -> str:
    return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True)

  @classmethod
  def from_json(cls, text: str) -> "TransformerConfig":
    values = json.loads(text)
    known = {field.name for field in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
      raise ValueError(f"Unknown TransformerConfig fields in JSON: {unknown}")
    return cls(**values)

  @classmethod
  def preset(cls, name: str, **overrides) -> "TransformerConfig":
    """A named size: tiny (tests), small (benchmarks), base and big (the paper's models)."""
    if name not in PRESETS:
      raise ValueError(f"Unknown preset {name!r}; choose one of {sorted(PRESETS)}")
    return cls(**{**PRESETS[name], **overrides})


PRESETS = {
  "tiny": dict(
    d_model=64,
    num_heads=4,
    dff=128,
    num_encoder_layers=2,
    num_decoder_layers=2,
    dropout_rate=0.0,
    max_length=128,
  ),
  "small": dict(
    d_model=256,
    num_heads=8,
    dff=1024,
    num_encoder_layers=4,
    num_decoder_layers=4,
    dropout_rate=0.1,
    max_length=256,
  ),
  "base": dict(
    d_model=512, num_heads=8, dff=2048, num_encoder_layers=6, num_decoder_layers=6, dropout_rate=0.1
  ),
  "big": dict(
    d_model=1024,
    num_heads=16,
    dff=4096,
    num_encoder_layers=6,
    num_decoder_layers=6,
    dropout_rate=0.3,
  ),
}
