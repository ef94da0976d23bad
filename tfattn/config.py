"""`TransformerConfig`: every hyper-parameter of a tfattn model, frozen and JSON-serialisable."""

import dataclasses
import json
from typing import Optional

import settings
from settings import check, setting
from tfattn import special_ids

_NORM_POSITIONS = ("post", "pre")
_POSITION_KINDS = ("sinusoidal", "learned")
_COMPUTE_DTYPES = ("float32", "float16", "bfloat16")
_POOLINGS = ("mean", "first")
_CLASSIFIER_BODIES = ("transformer", "attention")
_ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "swish")
# How a sinusoidal encoding lays out its sines and cosines.
_SINUSOID_LAYOUTS = ("interleaved", "halves")
_EMBEDDING_INITS = ("paper", "gpt2")


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
  """Architecture of a Transformer (Vaswani et al., 2017), of the encoder classifier and of the
  decoder-only language model.

  Every field is a declared setting (`settings.py`): its help, allowed values and range are
  checked on creation, and a field added after runs were saved declares `when_missing`, what
  those runs' missing value meant (`from_saved`), so an old `model_config.json` loads without a
  per-field migration.

  Token ids 0/1/2 are reserved for padding / start-of-sequence / end-of-sequence by default.
  """

  source_vocab_size: int = setting(8000, "Source (or only) vocabulary size.", above=0)
  target_vocab_size: int = setting(8000, "Target vocabulary size.", above=0)
  d_model: int = setting(512, "Width of every layer.", above=0)
  num_heads: int = setting(8, "Attention heads; d_model must be divisible by it.", above=0)
  dff: int = setting(2048, "Width of the feed-forward hidden layer.", above=0)
  num_encoder_layers: int = setting(6, "Encoder layers.", minimum=0)
  num_decoder_layers: int = setting(6, "Decoder layers (a language model's layers).", minimum=0)
  dropout_rate: float = setting(
    0.1,
    "The paper's residual dropout: each sublayer's output and the embeddings + positions.",
    minimum=0,
    below=1,
  )
  attention_dropout_rate: float = setting(
    0.0, "Dropout on the attention weights.", minimum=0, below=1, when_missing=0.0
  )
  feed_forward_dropout_rate: float = setting(
    0.0,
    "Dropout on the feed-forward hidden layer: not in the paper (tensor2tensor's relu_dropout).",
    minimum=0,
    below=1,
    when_missing=0.0,
  )
  max_length: int = setting(512, "Learned positions and the decoding length limit.", above=0)
  position_encoding: str = setting(
    "sinusoidal",
    "Position information: fixed sinusoids or a learned table.",
    choices=_POSITION_KINDS,
  )
  activation: str = setting(
    "relu",
    "The feed-forward hidden layer's nonlinearity: relu (the paper's eq. 2), gelu (exact, "
    "erf-based: nanoGPT's), gelu_tanh (the tanh approximation: GPT-2's and keras-hub's) or "
    "swish (x * sigmoid(x), SiLU: Marian's and OPUS-MT's).",
    choices=_ACTIVATIONS,
    when_missing="relu",
  )
  sinusoid_layout: str = setting(
    "interleaved",
    "Sinusoidal positions: interleaved (the paper: sin and cos of one frequency side by side) or "
    "halves ([sin | cos]: every sine, then every cosine, as Marian and fairseq lay them out; "
    "computed in float64, then float32).",
    choices=_SINUSOID_LAYOUTS,
    when_missing="interleaved",
  )
  norm_position: str = setting(
    "post",
    "Layer norm after each residual (the paper) or before each sublayer (trains deeper models "
    "stably).",
    choices=_NORM_POSITIONS,
  )
  share_embeddings: bool = setting(False, "Source and target share one embedding table.")
  tie_output_embedding: bool = setting(
    True, "The target embedding doubles as the pre-softmax weights."
  )
  embedding_init: str = setting(
    "paper",
    "Embedding tables: paper = normal(0, d_model^-0.5), inputs times sqrt(d_model) (section "
    "3.4); gpt2 = normal(0, 0.02), inputs as they are (GPT-2, nanoGPT; pair it with learned "
    "positions: sinusoids of amplitude 1 drown its lookups). With the tied output, the paper's "
    "gives a language model a first loss far above ln(vocab); gpt2's starts at ln(vocab).",
    choices=_EMBEDDING_INITS,
    when_missing="paper",
  )
  output_bias: bool = setting(
    False,
    "A learned per-token bias added to the output logits (Marian's final_logits_bias); an "
    "untied output projection always has its own bias.",
    when_missing=False,
  )
  layer_norm_epsilon: float = setting(
    1e-6, "Layer norm epsilon, of every norm (Marian: 1e-5).", above=0
  )
  compute_dtype: str = setting(
    "float32",
    "Variables stay float32; float16/bfloat16 compute in mixed precision.",
    choices=_COMPUTE_DTYPES,
  )
  pad_id: int = setting(special_ids.PAD_ID, "Padding token id.", minimum=0)
  bos_id: int = setting(special_ids.START_ID, "Start-of-sequence token id.", minimum=0)
  eos_id: int = setting(special_ids.END_ID, "End-of-sequence token id.", minimum=0)
  decoder_start_id: Optional[int] = setting(
    None,
    "The token a sequence-to-sequence decoder reads first, in training and decoding (Marian: "
    "its pad id). Unset: bos_id.",
    minimum=0,
  )
  num_classes: int = setting(2, "EncoderClassifier only: classes.", minimum=2, when_missing=2)
  pooling: str = setting(
    "mean",
    "EncoderClassifier only: masked mean or first token.",
    choices=_POOLINGS,
    when_missing="mean",
  )
  classifier_body: str = setting(
    "transformer",
    "EncoderClassifier only: the encoder stack, or one merged-head self-attention over "
    "embeddings + positions, no residual, norm or feed-forward (the single-layer experiment of "
    "Su Jianlin's write-up; dropout_rate then applies after pooling).",
    choices=_CLASSIFIER_BODIES,
    when_missing="transformer",
  )
  attention_window: Optional[int] = setting(
    None,
    "Restricted self-attention (paper section 4): each position attends only to keys within "
    "this many positions (encoder |i - j| <= r, decoder 0 <= i - j <= r), in blocks, O(n r); "
    "cross-attention stays full. Unset: full attention.",
    above=0,
  )
  seed: int = setting(0, "Initialisers and dropout.")

  def __post_init__(self):
    try:
      check(self, prefix="")
    except ValueError as error:
      raise ValueError(f"Invalid TransformerConfig: {error}") from None

    def require(condition, message):
      if not condition:
        raise ValueError(f"Invalid TransformerConfig: {message}")

    require(
      self.d_model % self.num_heads == 0,
      f"d_model ({self.d_model}) must be divisible by num_heads ({self.num_heads})",
    )
    require(
      self.source_vocab_size > max(self.pad_id, self.bos_id, self.eos_id),
      "source_vocab_size must include the special token ids",
    )
    require(
      self.target_vocab_size > max(self.pad_id, self.bos_id, self.eos_id, self.start_id),
      "target_vocab_size must include the special token ids",
    )
    require(
      not self.share_embeddings or self.source_vocab_size == self.target_vocab_size,
      "share_embeddings needs source_vocab_size == target_vocab_size",
    )

  @property
  def start_id(self) -> int:
    """The decoder's first token: `decoder_start_id`, else `bos_id`."""
    return self.bos_id if self.decoder_start_id is None else self.decoder_start_id

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
    """A saved config (`to_json`), from this version or an earlier one (see `from_saved`)."""
    return cls.from_saved(json.loads(text))

  @classmethod
  def from_saved(cls, values: dict) -> "TransformerConfig":
    """{field: value} as saved, perhaps by an earlier version: a field it lacks takes its
    declared `when_missing` (what runs saved before the field meant), else its default."""
    return settings.from_saved(cls, values)

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
