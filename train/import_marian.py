"""`python -m train.import_marian --marian_dir=DIR --run_dir=RUN`: a Marian / OPUS-MT checkpoint,
as the Hugging Face Hub stores it, becomes a tfattn run directory that every command takes as a
run of its own (serving.export, serving.server, serving.tools.*, train.evaluate, and train's
--init_from to fine-tune).

Nothing is fetched: download the checkpoint on a connected machine first (docs/pretrained.md).
The directory's files are checked before any weight is read (`train.marian_checkpoint`); a
problem is one line naming the file and the field. The run directory is written beside its
destination and renamed into place, so it is there whole or not at all.

What it writes (`tfattn/support/run_dir.py`'s layout):
  model_config.json  the Transformer: Marian's sizes, swish (its activation_function),
                     [sin | cos] sinusoids, post-norm with epsilon 1e-5, the output bias
                     (final_logits_bias), tied / shared embeddings as config.json says
  run_config.json    the decoding options generate() would use (generation_config.json):
                     beam size, len^alpha penalty, transformers' beam stop, the length limit,
                     END forced at the limit, the ids never generated
  task.json          a seq2seq task
  vocab/             source.marian, target.marian (`tfattn.marian_text`), the SentencePiece
                     models and vocabularies they read
  checkpoints/       the weights, float32, as ckpt-0
  marian.json        where it came from, and how tfattn's ids map to Marian's

Ids: tfattn reserves PAD 0, START 1, END 2, UNK 3. The import puts Marian's pad (its decoder
start) at 1, `</s>` at 2, `<unk>` at 3, the other Marian ids in their order from 4, and adds
PAD as a row of its own (never generated; its output bias is -1e4), so a vocabulary of V
pieces becomes V + 1 ids. The computation is Marian's; only the numbering moves.
"""

import cli

import dataclasses
import json
import os
import shutil
import tempfile
from typing import Optional

from settings import setting

# The output bias of tfattn's PAD row: its probability is exp(-1e4) = 0 in float32, so the
# softmax over V + 1 ids is Marian's over V.
PAD_LOGIT_BIAS = -1e4


@dataclasses.dataclass(frozen=True)
class ImportFlags:
  """The flags of `python -m train.import_marian`."""

  marian_dir: Optional[str] = setting(
    None,
    "The checkpoint directory as the Hub stores it (config.json, model.safetensors or "
    "pytorch_model.bin, source.spm, target.spm, vocab.json, ...).",
  )
  run_dir: Optional[str] = setting(None, "The tfattn run directory to write (must not exist).")


def decode_options(checkpoint):
  """generate()'s settings (generation_config.json, else config.json) as DecodeOptions, with the
  ids mapped to tfattn's; a MarianError for a setting tfattn has no equal of."""
  from tfattn.decode_options import DecodeOptions
  from train.marian_checkpoint import MarianError, tfattn_order

  g = checkpoint.generation
  source = "generation_config.json"
  order = tfattn_order(checkpoint.vocabularies["target"], checkpoint.tokenizer)
  tfattn_id = {marian: i + 1 for i, marian in enumerate(order)}
  early = g.get("early_stopping", False)
  if early is True:
    raise MarianError(
      f"{source}: early_stopping is true (stop at the first beam_size finished hypotheses); "
      "tfattn has false (--beam_stop=current) and 'never' (--beam_stop=bound)"
    )
  for name, neutral in (
    ("num_beam_groups", 1),
    ("repetition_penalty", 1.0),
    ("encoder_no_repeat_ngram_size", 0),
  ):
    if g.get(name) not in (None, neutral):
      raise MarianError(f"{source}: {name} {g[name]!r} has no tfattn equal")
  banned = [0]  # tfattn's PAD row
  for sequence in g.get("bad_words_ids") or ():
    if len(sequence) != 1:
      raise MarianError(f"{source}: bad_words_ids holds {sequence}: only single ids can be banned")
    banned.append(tfattn_id[sequence[0]])
  forced = g.get("forced_eos_token_id")
  if forced not in (None, checkpoint.config["eos_token_id"]):
    raise MarianError(f"{source}: forced_eos_token_id {forced} is not the eos_token_id")
  beams = int(g.get("num_beams") or 1)
  max_length = int(g.get("max_length") or 20)  # GenerationConfig's default
  if max_length < 2:
    raise MarianError(f"{source}: max_length {max_length} leaves no token to generate")
  return DecodeOptions(
    strategy="beam" if beams > 1 else "greedy",
    beam_size=max(beams, 1),
    alpha=float(g.get("length_penalty", 1.0)),
    length_penalty="power",
    beam_stop="bound" if early == "never" else "current",
    # generate()'s max_length counts the decoder's start token; min_length too.
    max_decode_length=min(max_length - 1, checkpoint.config["max_position_embeddings"]),
    min_decode_length=max(int(g.get("min_length") or 0) - 1, 0),
    no_repeat_ngram_size=int(g.get("no_repeat_ngram_size") or 0),
    never_generate=",".join(str(i) for i in sorted(set(banned))),
    end_at_limit=forced is not None,
  )


def embedding_tables(weights, checkpoint):
  """(source table, target table, untied output table or None), Marian's ids. transformers 5
  ties the encoder's and decoder's tables to `shared` only while tie_word_embeddings holds, so
  the tables the files hold are read, not what the config's names promise."""
  import numpy as np

  shared = ("shared.weight",) if checkpoint.shared else ()
  source = _weight(weights, "encoder.embed_tokens.weight", *shared)
  target = _weight(weights, "decoder.embed_tokens.weight", *shared)
  try:
    head = _weight(weights, "lm_head.weight")
  except ValueError:
    head = None  # tied: not saved
  if head is not None and head.shape == target.shape and np.array_equal(head, target):
    head = None
  if not checkpoint.config.get("tie_word_embeddings", True) and head is None:
    head = target  # untied, but the file holds one table: the same values, its own variable
  return source, target, head


def model_config(checkpoint, tables):
  """config.json and the embedding tables (`embedding_tables`) -> TransformerConfig."""
  import numpy as np

  from tfattn.config import TransformerConfig
  from train.marian_checkpoint import ACTIVATIONS

  c = checkpoint.config
  return TransformerConfig(
    source_vocab_size=checkpoint.vocabularies["source"].size + 1,
    target_vocab_size=checkpoint.vocabularies["target"].size + 1,
    d_model=c["d_model"],
    num_heads=c["encoder_attention_heads"],
    dff=c["encoder_ffn_dim"],
    num_encoder_layers=c["encoder_layers"],
    num_decoder_layers=c["decoder_layers"],
    dropout_rate=float(c.get("dropout", 0.1)),
    attention_dropout_rate=float(c.get("attention_dropout", 0.0)),
    feed_forward_dropout_rate=float(c.get("activation_dropout", 0.0)),
    max_length=c.get("max_position_embeddings", 512),
    position_encoding="sinusoidal",
    sinusoid_layout="halves",
    activation=ACTIVATIONS[c.get("activation_function", "gelu")],
    norm_position="post",
    share_embeddings=checkpoint.shared
    and tables[0].shape == tables[1].shape
    and bool(np.array_equal(tables[0], tables[1])),
    tie_output_embedding=tables[2] is None,
    embedding_init="paper" if c.get("scale_embedding", False) else "gpt2",
    layer_norm_epsilon=1e-5,  # torch.nn.LayerNorm's default, every Marian norm's
    output_bias=True,
  )


def _weight(weights, *names):
  """The first of `names` the checkpoint holds (with or without transformers' "model."
  prefix); a MarianError naming them when none is there."""
  from train.marian_checkpoint import MarianError

  for name in names:
    for key in (name, "model." + name):
      if key in weights:
        return weights[key]
  raise MarianError(f"the weights file holds none of {list(names)}")


def assign_weights(model, weights, checkpoint, tables) -> None:
  """Copies transformers' MarianMTModel weights into a tfattn Transformer (checked shapes)."""
  import numpy as np

  from train.marian_checkpoint import MarianError, tfattn_order

  def rows(table, side):
    order = tfattn_order(checkpoint.vocabularies[side], checkpoint.tokenizer)
    if table.shape[0] != len(order):
      raise MarianError(
        f"the {side} embedding has {table.shape[0]} rows, {checkpoint.vocabularies[side].file} "
        f"{len(order)} pieces"
      )
    return np.concatenate([np.zeros_like(table[:1]), table[order]], axis=0)

  def put(variable, value, what):
    if tuple(variable.shape) != value.shape:
      raise MarianError(f"{what}: shape {value.shape}, the config says {tuple(variable.shape)}")
    variable.assign(value)

  def linear(module, prefix):
    put(module.kernel, _weight(weights, prefix + ".weight").T, prefix + ".weight")
    put(module.bias, _weight(weights, prefix + ".bias"), prefix + ".bias")

  def fused(module, prefixes):
    kernel = np.concatenate([_weight(weights, p + ".weight").T for p in prefixes], axis=1)
    bias = np.concatenate([_weight(weights, p + ".bias") for p in prefixes])
    put(module.kernel, kernel, prefixes[0] + ".weight")
    put(module.bias, bias, prefixes[0] + ".bias")

  def norm(module, prefix):
    put(module.scale, _weight(weights, prefix + ".weight"), prefix + ".weight")
    put(module.offset, _weight(weights, prefix + ".bias"), prefix + ".bias")

  def feed_forward(layer, prefix):
    linear(layer.feed_forward.inner, prefix + ".fc1")
    linear(layer.feed_forward.outer, prefix + ".fc2")
    norm(layer.feed_forward_norm, prefix + ".final_layer_norm")

  source, target, head = tables
  put(model.encoder.embedding.table, rows(source, "source"), "encoder.embed_tokens.weight")
  if not model.config.share_embeddings:
    put(model.decoder.embedding.table, rows(target, "target"), "decoder.embed_tokens.weight")
  for i, layer in enumerate(model.encoder.layers):
    prefix = f"encoder.layers.{i}"
    attention = f"{prefix}.self_attn"
    fused(layer.self_attention.query_key_value, [f"{attention}.{p}_proj" for p in "qkv"])
    linear(layer.self_attention.output, f"{attention}.out_proj")
    norm(layer.self_attention_norm, f"{prefix}.self_attn_layer_norm")
    feed_forward(layer, prefix)
  for i, layer in enumerate(model.decoder.layers):
    prefix = f"decoder.layers.{i}"
    attention, cross = f"{prefix}.self_attn", f"{prefix}.encoder_attn"
    fused(layer.self_attention.query_key_value, [f"{attention}.{p}_proj" for p in "qkv"])
    linear(layer.self_attention.output, f"{attention}.out_proj")
    norm(layer.self_attention_norm, f"{prefix}.self_attn_layer_norm")
    linear(layer.cross_attention.query, f"{cross}.q_proj")
    fused(layer.cross_attention.key_value, [f"{cross}.{p}_proj" for p in "kv"])
    linear(layer.cross_attention.output, f"{cross}.out_proj")
    norm(layer.cross_attention_norm, f"{prefix}.encoder_attn_layer_norm")
    feed_forward(layer, prefix)
  bias = _weight(weights, "final_logits_bias").reshape(-1)
  order = tfattn_order(checkpoint.vocabularies["target"], checkpoint.tokenizer)
  if bias.shape[0] != len(order):
    raise MarianError(f"final_logits_bias: {bias.shape[0]} values for {len(order)} target ids")
  bias = np.concatenate([[PAD_LOGIT_BIAS], bias[order]]).astype(np.float32)
  if model.output_projection is None:
    put(model.output_bias, bias, "final_logits_bias")
  else:
    put(model.output_projection.kernel, rows(head, "target").T, "lm_head.weight")
    put(model.output_projection.bias, bias, "final_logits_bias")


def _spm_problems(path: str):
  """(control pieces, a problem or None) of a SentencePiece model."""
  import sentencepiece

  model = sentencepiece.SentencePieceProcessor(model_file=path)
  size = model.get_piece_size()
  if any(model.is_byte(i) for i in range(size)):
    return (), f"{path}: uses byte fallback, which MarianTokenizer's decoding does not undo"
  return [model.id_to_piece(i) for i in range(size) if model.is_control(i)], None


def write_vocabularies(checkpoint, vocab_dir: str) -> None:
  """The SentencePiece models, the vocabularies and a `.marian` file a side."""
  from tfattn.marian_text import MARIAN_SUFFIX, special_tokens_of, write_spec
  from train.marian_checkpoint import MarianError, tfattn_order

  os.makedirs(vocab_dir)
  shared = checkpoint.vocabularies["source"] is checkpoint.vocabularies["target"]
  # transformers decodes with source.spm when the vocabulary is shared (tokenization_marian.py).
  decode_spm = "source.spm" if shared else "target.spm"
  control, problem = _spm_problems(os.path.join(checkpoint.directory, decode_spm))
  if problem:
    raise MarianError(problem)
  for name in ("source.spm", "target.spm", "tokenizer_config.json"):
    path = os.path.join(checkpoint.directory, name)
    if os.path.exists(path):
      shutil.copyfile(path, os.path.join(vocab_dir, name))
  limit = min(
    int(checkpoint.tokenizer.get("model_max_length") or 512),
    int(checkpoint.config.get("max_position_embeddings", 512)),
  )
  for side in ("source", "target"):
    vocabulary = checkpoint.vocabularies[side]
    shutil.copyfile(
      os.path.join(checkpoint.directory, vocabulary.file), os.path.join(vocab_dir, vocabulary.file)
    )
    write_spec(
      os.path.join(vocab_dir, side + MARIAN_SUFFIX),
      {
        "side": side,
        "spm": f"{side}.spm",
        "vocab": vocabulary.file,
        "max_length": limit,
        "ids": tfattn_order(vocabulary, checkpoint.tokenizer),
        "special_tokens": special_tokens_of(checkpoint.tokenizer),
        "decode_spm": decode_spm,
        "control_pieces": [p for p in control if p in vocabulary.pieces],
        "clean_up_tokenization_spaces": bool(
          checkpoint.tokenizer.get("clean_up_tokenization_spaces", False)
        ),
      },
    )


def import_checkpoint(marian_dir: str, run_dir: str) -> dict:
  """Writes the run directory (see the module docstring); returns what marian.json records."""
  import tensorflow as tf

  from tfattn.support.run_dir import RunDir
  from tfattn.transformer import Transformer
  from train import marian_checkpoint
  from train.files import write_json_atomically, write_text_atomically
  from train.run_config import RunConfig
  from train.task import TSV_SEQ2SEQ_DEFAULTS

  checkpoint = marian_checkpoint.read(marian_dir)
  options = decode_options(checkpoint)
  weights = marian_checkpoint.load_weights(checkpoint)
  tables = embedding_tables(weights, checkpoint)
  config = model_config(checkpoint, tables)
  model = Transformer(config)
  assign_weights(model, weights, checkpoint, tables)
  parent = os.path.dirname(os.path.abspath(run_dir))
  os.makedirs(parent, exist_ok=True)
  staging = tempfile.mkdtemp(prefix=".import_", dir=parent)
  try:
    layout = RunDir(staging)
    write_vocabularies(checkpoint, layout.vocab)
    write_text_atomically(layout.model_config, config.to_json())
    # What a run of --task=tsv records, the model's own settings included: train.evaluate
    # reads its batching and decoding; a fine-tuning run (--init_from) takes the model's.
    RunConfig.of(
      task="tsv",
      d_model=config.d_model,
      num_heads=config.num_heads,
      dff=config.dff,
      num_layers=config.num_encoder_layers,
      max_length=config.max_length,
      activation=config.activation,
      sinusoid_layout=config.sinusoid_layout,
      output_bias=config.output_bias,
      layer_norm_epsilon=config.layer_norm_epsilon,
      decode=options.to_dict(),
    ).resolved(TSV_SEQ2SEQ_DEFAULTS).save(layout.run_config)
    write_json_atomically(
      layout.task, {"name": "marian", "kind": "seq2seq", "num_classes": 2, "truncate": "right"}
    )
    manager = tf.train.CheckpointManager(
      tf.train.Checkpoint(model=model), layout.checkpoints, max_to_keep=1
    )
    manager.save(checkpoint_number=0)
    record = {
      "marian_dir": os.path.abspath(marian_dir),
      "weights_file": checkpoint.weights_file,
      "shared_vocabulary": checkpoint.shared,
      "decode": options.to_dict(),
      "renormalize_logits": bool(checkpoint.generation.get("renormalize_logits", False)),
    }
    write_json_atomically(os.path.join(staging, "marian.json"), record)
    os.rename(staging, run_dir)
  except BaseException:
    shutil.rmtree(staging, ignore_errors=True)
    raise
  return record


def main(argv):
  del argv
  from absl import flags

  f = flags.FLAGS
  if not f.marian_dir or not f.run_dir:
    raise cli.UsageError("give --marian_dir (the downloaded checkpoint) and --run_dir")
  if os.path.exists(f.run_dir) and os.listdir(f.run_dir):
    raise cli.UsageError(f"--run_dir {f.run_dir} exists and is not empty: give a new one")
  from train.marian_checkpoint import MarianError, read

  try:
    read(f.marian_dir)  # every file and field checked before TensorFlow starts
  except MarianError as error:
    raise cli.UsageError(str(error)) from None
  if os.path.isdir(f.run_dir):
    os.rmdir(f.run_dir)  # empty: the import renames its staging folder into its place
  cli.start_tensorflow_quietly()
  try:
    record = import_checkpoint(f.marian_dir, f.run_dir)
  except MarianError as error:
    raise cli.UsageError(str(error)) from None
  print(f"imported {f.marian_dir} -> {f.run_dir} (decoding: {json.dumps(record['decode'])})")
  if "1" in record["decode"]["never_generate"].split(",") and not record["renormalize_logits"]:
    print(
      "note: generation_config.json has no renormalize_logits: transformers then ranks beams "
      "with the banned ids' probability left in; tfattn leaves them out (docs/pretrained.md)"
    )


if __name__ == "__main__":
  cli.define_flags(ImportFlags)
  cli.run(main)
