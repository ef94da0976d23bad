"""Reading a Marian / OPUS-MT checkpoint directory as the Hugging Face Hub lays it out, without
transformers: its files checked, its settings translated into tfattn's, its weights as numpy.

  config.json               MarianConfig (model_type "marian")
  model.safetensors         the weights (read with the safetensors package, no torch), or
  pytorch_model.bin         (needs torch)
  source.spm, target.spm    SentencePiece models
  vocab.json                piece -> id (shared, or the source's with separate vocabularies)
  target_vocab.json         piece -> id of the target (separate vocabularies only)
  tokenizer_config.json     MarianTokenizer's settings (optional)
  generation_config.json    generate()'s defaults (optional; older checkpoints keep them in
                            config.json)

Every problem is a `MarianError` naming the file and the field, raised before any weight is
read. What the settings mean is transformers' code (`models/marian/`, cited in
docs/pretrained.md); the import follows it, not the settings' names.
"""

import json
import os
from typing import Dict, List, NamedTuple, Optional

import numpy as np


class MarianError(ValueError):
  """A checkpoint directory tfattn cannot import, in one line naming the file and the field."""


# transformers' ACT2FN names -> tfattn's activations.
ACTIVATIONS = {
  "swish": "swish",
  "silu": "swish",
  "relu": "relu",
  "gelu": "gelu",
  "gelu_new": "gelu_tanh",
  "gelu_pytorch_tanh": "gelu_tanh",
}
# config.json fields transformers' Marian model ignores; a value other than these means the
# checkpoint was made for a model that transformers' port (and so this import) does not run.
MUST_BE = {
  "normalize_before": False,  # pre-norm Marian
  "normalize_embedding": False,  # a layer norm on the embeddings
  "add_final_layer_norm": False,
  "static_position_embeddings": True,  # learned positions
  "add_bias_logits": False,
}
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")


def _read_json(directory: str, name: str, required: bool = True) -> Optional[dict]:
  path = os.path.join(directory, name)
  if not os.path.exists(path):
    if required:
      raise MarianError(f"{path}: missing (a Marian checkpoint directory as the Hub stores it)")
    return None
  try:
    with open(path, encoding="utf-8") as f:
      values = json.load(f)
  except (OSError, ValueError) as error:
    raise MarianError(f"{path}: not readable JSON ({error})") from None
  if not isinstance(values, dict):
    raise MarianError(f"{path}: expected a JSON object")
  return values


class Vocabulary(NamedTuple):
  """One side's vocabulary file.

  Attributes:
    file: its name ("vocab.json" or "target_vocab.json").
    pieces: {piece: Marian id}, ids 0..size-1, each once.
  """

  file: str
  pieces: Dict[str, int]

  @property
  def size(self) -> int:
    return len(self.pieces)


class MarianCheckpoint(NamedTuple):
  """What an import needs, checked.

  Attributes:
    directory: the checkpoint directory.
    config: config.json.
    generation: generate()'s settings (generation_config.json over config.json's).
    tokenizer: tokenizer_config.json ({} without one).
    vocabularies: {"source": Vocabulary, "target": Vocabulary} (the same one when shared).
    shared: one vocabulary and one embedding for both sides.
    weights_file: model.safetensors or pytorch_model.bin.
  """

  directory: str
  config: dict
  generation: dict
  tokenizer: dict
  vocabularies: Dict[str, Vocabulary]
  shared: bool
  weights_file: str


def _field(config: dict, name: str, default=None):
  value = config.get(name, default)
  if value is None:
    raise MarianError(f"config.json: {name} is missing")
  return value


def read(directory: str) -> MarianCheckpoint:
  """Checks a checkpoint directory (files and fields, no weights read) -> `MarianCheckpoint`;
  a `MarianError` naming the file and field of the first problem."""
  if not os.path.isdir(directory):
    raise MarianError(f"{directory}: not a directory (give the downloaded checkpoint's folder)")
  config = _read_json(directory, "config.json")
  model_type = config.get("model_type")
  if model_type != "marian":
    raise MarianError(
      f"config.json: model_type is {model_type!r}, not 'marian': only Marian / OPUS-MT "
      "checkpoints import"
    )
  for name, allowed in MUST_BE.items():
    if name in config and bool(config[name]) != allowed:
      raise MarianError(
        f"config.json: {name} is {config[name]!r}; transformers' Marian (and tfattn's import) "
        f"runs only {name}={allowed!r}"
      )
  activation = config.get("activation_function", "gelu")
  if activation not in ACTIVATIONS:
    raise MarianError(
      f"config.json: activation_function {activation!r} is not one tfattn has "
      f"({', '.join(sorted(ACTIVATIONS))})"
    )
  for a, b in (
    ("encoder_ffn_dim", "decoder_ffn_dim"),
    ("encoder_attention_heads", "decoder_attention_heads"),
  ):
    if _field(config, a) != _field(config, b):
      raise MarianError(f"config.json: {a} ({config[a]}) differs from {b} ({config[b]})")
  if _field(config, "d_model") % _field(config, "encoder_attention_heads"):
    raise MarianError("config.json: d_model is not a multiple of encoder_attention_heads")
  if config.get("pad_token_id") is None or config.get("eos_token_id") is None:
    raise MarianError("config.json: pad_token_id and eos_token_id are required")
  if isinstance(config["eos_token_id"], list):
    raise MarianError("config.json: eos_token_id is a list; one end token is supported")
  start = config.get("decoder_start_token_id", config["pad_token_id"])
  if start != config["pad_token_id"]:
    raise MarianError(
      f"config.json: decoder_start_token_id ({start}) is not pad_token_id "
      f"({config['pad_token_id']}), as every Marian model's is"
    )
  tokenizer = _read_json(directory, "tokenizer_config.json", required=False) or {}
  generation = dict(config)
  generation.update(_read_json(directory, "generation_config.json", required=False) or {})
  weights_file = next(
    (name for name in WEIGHT_FILES if os.path.exists(os.path.join(directory, name))), None
  )
  if weights_file is None:
    raise MarianError(f"{directory}: no weights ({' or '.join(WEIGHT_FILES)})")
  for name in ("source.spm", "target.spm"):
    if not os.path.exists(os.path.join(directory, name)):
      raise MarianError(f"{os.path.join(directory, name)}: missing")
  separate = bool(tokenizer.get("separate_vocabs", False))
  shared = bool(config.get("share_encoder_decoder_embeddings", True))
  if shared and separate:
    raise MarianError(
      "tokenizer_config.json: separate_vocabs is true but config.json's "
      "share_encoder_decoder_embeddings is true"
    )
  source = _vocabulary(directory, "vocab.json")
  target = _vocabulary(directory, "target_vocab.json") if separate else source
  vocab_size = _field(config, "vocab_size")
  target_size = config.get("decoder_vocab_size") or vocab_size
  if source.size != vocab_size:
    raise MarianError(
      f"vocab.json: {source.size} pieces, but config.json's vocab_size is {vocab_size}"
    )
  if target.size != target_size:
    raise MarianError(
      f"{target.file}: {target.size} pieces, but config.json's decoder_vocab_size is {target_size}"
    )
  if shared and target_size != vocab_size:
    raise MarianError(
      "config.json: share_encoder_decoder_embeddings with decoder_vocab_size != vocab_size"
    )
  for _side, vocabulary in (("source", source), ("target", target)):
    for key, config_key in (("pad_token", "pad_token_id"), ("eos_token", "eos_token_id")):
      token = _token(tokenizer, key)
      if vocabulary.pieces.get(token) != config[config_key]:
        raise MarianError(
          f"{vocabulary.file}: {token!r} has id {vocabulary.pieces.get(token)}, but "
          f"config.json's {config_key} is {config[config_key]}"
        )
    if _token(tokenizer, "unk_token") not in vocabulary.pieces:
      raise MarianError(f"{vocabulary.file}: no {_token(tokenizer, 'unk_token')!r} piece")
  return MarianCheckpoint(
    directory,
    config,
    generation,
    tokenizer,
    {"source": source, "target": target},
    shared,
    weights_file,
  )


_DEFAULT_TOKENS = {"eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"}


def _token(tokenizer: dict, key: str) -> str:
  token = tokenizer.get(key, _DEFAULT_TOKENS[key])
  return token["content"] if isinstance(token, dict) else token


def _vocabulary(directory: str, name: str) -> Vocabulary:
  pieces = _read_json(directory, name)
  ids = sorted(pieces.values()) if all(isinstance(v, int) for v in pieces.values()) else None
  if ids != list(range(len(pieces))):
    raise MarianError(f"{name}: ids must be 0..{len(pieces) - 1}, each once")
  return Vocabulary(name, pieces)


def tfattn_order(vocabulary: Vocabulary, tokenizer: dict) -> List[int]:
  """The Marian ids in tfattn's order, for tfattn ids 1..: pad (tfattn START: Marian's decoder
  start), </s> (END), <unk> (UNK), then every other id ascending. tfattn id 0 (PAD) is a row of
  its own."""
  first = [vocabulary.pieces[_token(tokenizer, key)] for key in ("pad_token", "eos_token")]
  first.append(vocabulary.pieces[_token(tokenizer, "unk_token")])
  if len(set(first)) != 3:
    raise MarianError(f"{vocabulary.file}: pad, eos and unk tokens must be three different ids")
  taken = set(first)
  return first + [i for i in range(vocabulary.size) if i not in taken]


def load_weights(checkpoint: MarianCheckpoint) -> Dict[str, np.ndarray]:
  """{name: float32 array} of the weights file (fp16 becomes float32); a MarianError when it
  cannot be read here."""
  path = os.path.join(checkpoint.directory, checkpoint.weights_file)
  if checkpoint.weights_file == "model.safetensors":
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    try:
      arrays = load_file(path)
    except (SafetensorError, OSError, ValueError, TypeError) as error:
      raise MarianError(
        f"{path}: not readable as float32/float16 safetensors ({error}); bfloat16 files: "
        "convert with torch first"
      ) from None
  else:
    try:
      import torch
    except ImportError:
      raise MarianError(
        f"{path}: reading pytorch_model.bin needs torch, which is not installed: pip install "
        "torch, or convert it where transformers is: MarianMTModel.from_pretrained(DIR)"
        ".save_pretrained(DIR) writes model.safetensors"
      ) from None
    state = torch.load(path, map_location="cpu", weights_only=True)
    arrays = {name: value.float().numpy() for name, value in state.items()}
  return {name: np.asarray(value, np.float32) for name, value in arrays.items()}
