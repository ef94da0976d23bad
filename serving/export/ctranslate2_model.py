"""A trained sequence-to-sequence run -> a CTranslate2 model directory, through CTranslate2's own
Python spec API (`ctranslate2.specs.TransformerSpec`), so the engine production translation
runs on serves the very weights our SavedModel serves.

What is carried over, and how (CTranslate2's names on the right):
  * every weight: the fused query/key/value kernel (self-attention), the query and the fused
    key/value kernels (cross-attention), the output kernels, the feed-forward layers, the norms;
    kernels transposed to CTranslate2's `[out, in]`;
  * the norm placement (`pre_norm`; a pre-norm model's final norms), the layer-norm epsilon
    (`config.layer_norm_epsilon`), the activation (relu, gelu, gelu_tanh, swish);
  * the embeddings: the sqrt(d_model) scale of the paper's initialisation (`scale_embeddings`),
    shared or separate tables, the tied or separate output layer and its bias (a tied output's
    `output_bias`, Marian's `final_logits_bias`, as the projection's bias);
  * the positions: our own table written out (`position_encodings.encodings`, `max_length` rows
    of the interleaved or `[sin | cos]` sinusoids or of the learned table): no layout assumed;
  * the vocabularies, one token a line, ids kept: the config's `start_id` starts the decoder
    (`decoder_start_token`: `[START]`, or an imported Marian model's `<pad>`), `eos_id` ends a
    hypothesis, id 3 is the unknown token; the source is given as our export tokenizes it
    (a Marian source with its `</s>`). An imported Marian model's pieces are `vocab.json`'s;
    our own padding row (id 0) is named `PAD_TOKEN`;
  * the run's `never_generate` ids: an output bias of -inf at those ids, so CTranslate2's softmax
    runs over the rest, as our search's does (CTranslate2's own Marian converter drops `<pad>`
    from the vocabulary for the same effect).

CTranslate2 is not a requirement of tfattn (`requirements-ctranslate2.txt`): it is imported
inside `write_model`, and every refusal happens before it is.
"""

import math
import os
import shutil
from typing import List, Optional, Sequence

# CTranslate2's compute types a converted model may be quantized to when it is written (its
# `quantization`); any model can also be loaded with another `compute_type`.
QUANTIZATIONS = ("float32", "float16", "bfloat16", "int8", "int8_float16", "int8_float32", "int16")
# Our activations -> CTranslate2's `common_spec.Activation` member names.
_ACTIVATIONS = {"relu": "RELU", "gelu": "GELU", "gelu_tanh": "GELUTanh", "swish": "SWISH"}
# The name of tfattn's padding row (id 0) in an imported Marian model's vocabulary, whose
# `<pad>` is its own id (the decoder's start): a name no SentencePiece piece has.
PAD_TOKEN = "<tfattn:pad>"


def check_convertible(config) -> None:
  """A ValueError naming the first field of a `TransformerConfig` that CTranslate2's Transformer
  cannot express (before anything is converted)."""
  if config.activation not in _ACTIVATIONS:
    raise ValueError(
      f"activation={config.activation!r} has no CTranslate2 equivalent here "
      f"(supported: {', '.join(sorted(_ACTIVATIONS))})"
    )
  if config.attention_window is not None:
    raise ValueError(
      "attention_window is set: CTranslate2 has no windowed encoder self-attention; "
      "only full-attention models convert"
    )
  if config.num_decoder_layers < 1 or config.num_encoder_layers < 1:
    raise ValueError("only encoder-decoder models (seq2seq runs) convert to CTranslate2")


def _transposed(variable):
  """Our `[in, out]` kernel -> CTranslate2's `[out, in]` weight (float32 numpy)."""
  return variable.numpy().T.copy()


def _set_linear(spec, linear) -> None:
  spec.weight = _transposed(linear.kernel)
  if linear.bias is not None:
    spec.bias = linear.bias.numpy()


def _set_norm(spec, norm) -> None:
  spec.gamma = norm.scale.numpy()
  spec.beta = norm.offset.numpy()


def _position_table(stack, config):
  """float32 `[max_length, d_model]`: the encodings our stack adds at positions 0..max_length-1."""
  import tensorflow as tf

  from tfattn import position

  if config.position_encoding == "learned":
    return stack.position.table.numpy()
  return position.sinusoidal_encoding(
    tf.range(config.max_length), config.d_model, layout=config.sinusoid_layout
  ).numpy()


def _set_stack(spec, stack, config, embedding_spec) -> None:
  """What encoder and decoder share: embeddings, their scale, positions, the final norm."""
  embedding_spec.weight = stack.embedding.table.numpy()
  spec.scale_embeddings = math.sqrt(config.d_model) if stack.embedding.scales_inputs else False
  spec.position_encodings.encodings = _position_table(stack, config)
  if stack.final_norm is not None:
    _set_norm(spec.layer_norm, stack.final_norm)


def _set_self_attention(spec, layer) -> None:
  _set_linear(spec.linear[0], layer.self_attention.query_key_value)  # [3 d, d]: q | k | v
  _set_linear(spec.linear[1], layer.self_attention.output)
  _set_norm(spec.layer_norm, layer.self_attention_norm)


def _set_feed_forward(spec, layer) -> None:
  _set_linear(spec.linear_0, layer.feed_forward.inner)
  _set_linear(spec.linear_1, layer.feed_forward.outer)
  _set_norm(spec.layer_norm, layer.feed_forward_norm)


def _output_bias(model, banned_ids: Sequence[int]):
  """float32 `[target_vocab]` or None: the output layer's bias (an untied layer's, or a tied
  output's `output_bias`), -inf at `banned_ids`."""
  import numpy as np

  bias = model.output_projection.bias if model.output_projection is not None else model.output_bias
  if bias is None and not banned_ids:
    return None
  values = np.zeros([model.config.target_vocab_size], np.float32)
  if bias is not None:
    values = bias.numpy().astype(np.float32)
  values[list(banned_ids)] = -np.inf
  return values


def model_spec(model, banned_ids: Sequence[int] = ()):
  """A `ctranslate2.specs.TransformerSpec` holding `model`'s weights (a `tfattn.Transformer`);
  `banned_ids`: target ids never generated (the run's `never_generate`)."""
  from ctranslate2.specs import common_spec, transformer_spec

  config = model.config
  check_convertible(config)
  spec = transformer_spec.TransformerSpec.from_config(
    (config.num_encoder_layers, config.num_decoder_layers),
    config.num_heads,
    pre_norm=config.norm_position == "pre",
    activation=getattr(common_spec.Activation, _ACTIVATIONS[config.activation]),
  )
  spec.config.layer_norm_epsilon = config.layer_norm_epsilon
  encoder, decoder = model.encoder, model.decoder
  _set_stack(spec.encoder, encoder, config, spec.encoder.embeddings[0])
  for layer_spec, layer in zip(spec.encoder.layer, encoder.layers):
    _set_self_attention(layer_spec.self_attention, layer)
    _set_feed_forward(layer_spec.ffn, layer)
  _set_stack(spec.decoder, decoder, config, spec.decoder.embeddings)
  for layer_spec, layer in zip(spec.decoder.layer, decoder.layers):
    _set_self_attention(layer_spec.self_attention, layer)
    cross = layer.cross_attention
    _set_linear(layer_spec.attention.linear[0], cross.query)
    _set_linear(layer_spec.attention.linear[1], cross.key_value)  # [2 d, d]: k | v
    _set_linear(layer_spec.attention.linear[2], cross.output)
    _set_norm(layer_spec.attention.layer_norm, layer.cross_attention_norm)
    _set_feed_forward(layer_spec.ffn, layer)
  if model.output_projection is None:  # tied: the target table is the output layer
    spec.decoder.projection.weight = decoder.embedding.table.numpy()
  else:
    spec.decoder.projection.weight = _transposed(model.output_projection.kernel)
  bias = _output_bias(model, banned_ids)
  if bias is not None:
    spec.decoder.projection.bias = bias
  return spec


def vocabulary_tokens(tokenizer) -> List[str]:
  """The tokenizer's vocabulary, one string an id (ids 0..3 are PAD, START, END, UNK): the
  SentencePiece pieces, the WordPiece lines, or a character or byte vocabulary's lines."""
  from tfattn import marian_text, text

  spec_path = getattr(tokenizer, "spec_path", None)
  if spec_path is not None:  # an imported Marian model: vocab.json's pieces
    return [PAD_TOKEN, *marian_text.pieces_of(spec_path)[1:]]
  model_file = getattr(tokenizer, "model_file", None)
  if model_file is not None:  # SentencePiece: its pieces, read with the sentencepiece library
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor(model_file=_asset_path(model_file))
    return [processor.id_to_piece(i) for i in range(processor.get_piece_size())]
  vocab_file = getattr(tokenizer, "vocab_file", None)
  if vocab_file is None:
    raise ValueError(f"{type(tokenizer).__name__}: no vocabulary file to convert")
  with open(_asset_path(vocab_file), encoding="utf-8") as f:
    lines = [line.rstrip("\n") for line in f]
  if tuple(lines[: len(text.RESERVED_TOKENS)]) != text.RESERVED_TOKENS:
    raise ValueError(f"{_asset_path(vocab_file)}: does not start with {text.RESERVED_TOKENS}")
  return lines


def _asset_path(asset) -> str:
  path = asset.asset_path
  return path.numpy().decode() if hasattr(path, "numpy") else str(path)


def write_model(
  model,
  source_tokens: Sequence[str],
  target_tokens: Sequence[str],
  output_dir: str,
  quantization: Optional[str] = None,
  extra_files: Sequence[str] = (),
  banned_ids: Sequence[int] = (),
) -> str:
  """Writes `model` as a CTranslate2 model directory, atomically (a hidden temporary directory
  renamed into place); refuses an existing `output_dir`. Returns `output_dir`.

  Args:
    model: a `tfattn.Transformer`.
    source_tokens, target_tokens: one string an id (`vocabulary_tokens`).
    output_dir: the directory to create.
    quantization: store the weights in one of `QUANTIZATIONS` (None: float32).
    extra_files: files copied beside the model (e.g. the SentencePiece models).
    banned_ids: target ids CTranslate2 must never generate (the run's `never_generate`).
  """
  from tfattn import special_ids

  if quantization is not None and quantization not in QUANTIZATIONS:
    raise ValueError(
      f"quantization must be one of {', '.join(QUANTIZATIONS)}, got {quantization!r}"
    )
  if os.path.exists(output_dir):
    raise ValueError(f"{output_dir} exists: give a new directory")
  config = model.config
  for side, tokens, size in (
    ("source", source_tokens, config.source_vocab_size),
    ("target", target_tokens, config.target_vocab_size),
  ):
    if len(tokens) != size:
      raise ValueError(f"the {side} vocabulary has {len(tokens)} tokens, the model {size}")
  if len(set(target_tokens)) != len(target_tokens) or len(set(source_tokens)) != len(source_tokens):
    raise ValueError("a vocabulary names two ids alike: CTranslate2 maps tokens, not ids")
  spec = model_spec(model, banned_ids)
  spec.config.unk_token = target_tokens[special_ids.UNK_ID]
  spec.config.bos_token = target_tokens[config.bos_id]
  spec.config.eos_token = target_tokens[config.eos_id]
  spec.config.decoder_start_token = target_tokens[config.start_id]
  spec.register_source_vocabulary(list(source_tokens))
  spec.register_target_vocabulary(list(target_tokens))
  spec.validate()
  spec.optimize(quantization=quantization)
  parent = os.path.dirname(os.path.abspath(output_dir))
  os.makedirs(parent, exist_ok=True)
  temp = os.path.join(parent, f".tmp-ctranslate2-{os.getpid()}-{os.path.basename(output_dir)}")
  shutil.rmtree(temp, ignore_errors=True)
  try:
    os.makedirs(temp)
    spec.save(temp)
    for path in extra_files:
      shutil.copy(path, temp)
    os.rename(temp, output_dir)
  except BaseException:
    shutil.rmtree(temp, ignore_errors=True)
    raise
  return output_dir


def convert_run(
  run_dir: str, output_dir: str, quantization: Optional[str] = None, checkpoint=None
) -> str:
  """A training run directory (the weights its export would serve) -> a CTranslate2 model
  directory with the run's vocabulary files beside it. Returns `output_dir`."""
  from serving.export.trained_run import load_trained, run_decode_options
  from tfattn import kinds

  trained = load_trained(run_dir, checkpoint)
  if trained.task_info["kind"] != kinds.SEQ2SEQ:
    raise ValueError(
      f"{run_dir} is a {trained.task_info['kind']} run: only seq2seq runs convert to CTranslate2"
    )
  check_convertible(trained.model.config)
  tokenizers = trained.tokenizers
  files = {
    _asset_path(t.model_file if hasattr(t, "model_file") else t.vocab_file)
    for t in tokenizers.values()
  }
  return write_model(
    trained.model,
    vocabulary_tokens(tokenizers["source"]),
    vocabulary_tokens(tokenizers["target"]),
    output_dir,
    quantization,
    extra_files=sorted(files),
    banned_ids=run_decode_options(run_dir).banned_ids,
  )
