"""Makes Marian checkpoints with random weights and what transformers answers for them: the
reference side of issue 50's exactness checks. Runs only where torch, transformers and
sentencepiece are installed (requirements-marian-reference.txt; `make check-marian`), never in
`make test`: the tiny checkpoints it makes are committed under tests/fixtures/marian/.

    PYTHONPATH=. .venv-ref/bin/python benchmarks/marian_reference.py --out_dir=tests/fixtures/marian
    PYTHONPATH=. .venv-ref/bin/python benchmarks/marian_reference.py --out_dir=tmp/marian --base

(PYTHONPATH: the repository's cli.py and settings.py, for its flags; absl-py is in the
requirements file. torch and transformers are imported once the flags are checked.)

Each checkpoint is a MarianMTModel built from a MarianConfig, with SentencePiece models trained
here on generated text and a vocab.json made from their pieces (as OPUS-MT's converter makes
it: </s> 0, <unk> 1, the pieces, <pad> last), saved with save_pretrained (model.safetensors,
config.json, generation_config.json) and the tokenizer's save_pretrained (source.spm,
target.spm, vocab.json, tokenizer_config.json), the Hub's layout. Beside it, `expected.npz`:

  source_ids     MarianTokenizer(text, truncation=True)'s ids of every text of texts.txt
  target_ids     the same, text_target= (the first TARGET_TEXTS texts)
  decode_ids     random id rows, and batch_decode(rows, skip_special_tokens=True) as decode_text
  forward_*      a padded batch: encoder outputs and the teacher-forced logits
  greedy_*, beam_*: generate()'s ids and batch_decode text, at batch 1 and in a mixed batch

Texts (texts.txt, one JSON string a line): words, Unicode, characters the SentencePiece models
lack, empty and blank lines, texts longer than the tokenizer's limit, language tokens, the
special tokens' own text.
"""

import cli

import dataclasses
import json
import os
import random
import tempfile
from typing import Optional

import numpy as np

from settings import setting

# Imported by `main` once the flags are checked (the reference venv has them, .venv does not).
sentencepiece = torch = GenerationConfig = MarianConfig = MarianMTModel = MarianTokenizer = None


@dataclasses.dataclass(frozen=True)
class ReferenceFlags:
  out_dir: Optional[str] = setting(None, "Where the checkpoints and texts.txt go (required).")
  base: bool = setting(False, "Also a base-size checkpoint (6+6, d512, 58,101 pieces).")
  only_base: bool = setting(False, "Only the base-size checkpoint.")


TEXTS = 1200
TARGET_TEXTS = 300
DECODE_ROWS = 300
GENERATE_TEXTS = 6  # the mixed batch; the first 3 also alone
GENERATE_MAX_LENGTH = 24
LANGUAGES = (">>fra<<", ">>deu<<", ">>spa<<")

ENGLISH = (
  "the quick brown fox jumps over a lazy dog while people watch from their houses and "
  "nobody knows why this happens every single morning in the small town near the river"
).split()
GERMAN = (
  "der schnelle braune Fuchs springt über den faulen Hund während Leute aus ihren Häusern "
  "zusehen und niemand weiß warum das jeden Morgen in der kleinen Stadt am Fluss geschieht"
).split()
OTHER = ["ça", "été", "Ärger", "Straße", "naïve", "Ωμέγα", "Привет", "مرحبا", "漢字", "😀", "東京"]
ODD = ["\u3000", "\t", "\n", "\xa0", "  ", "\u200b", "\x1c", "…", "—", "«", "»", "½", "ﬁ"]


def make_texts(seed=0):
  """TEXTS strings covering what a tokenizer must get right."""
  rng = random.Random(seed)
  texts = ["", " ", "  \t ", "\n", ">>fra<<", ">>fra<< ", ">>xx<< hello", "</s>", "<unk>", "<pad>"]
  texts += ["hello </s> world", "a<unk>b", ">>deu<< der Hund </s> >>fra<< ça", "x >>fra<< y"]
  while len(texts) < TEXTS:
    kind = rng.random()
    words = rng.choice([ENGLISH, GERMAN])
    n = rng.randint(1, 14)
    parts = [rng.choice(words) for _ in range(n)]
    if kind < 0.25:
      parts = [rng.choice(OTHER + ODD + parts) if rng.random() < 0.4 else p for p in parts]
    text = " ".join(parts)
    if kind > 0.9:
      text = " ".join(rng.choice(words) for _ in range(rng.randint(40, 90)))  # over the limit
    if rng.random() < 0.2:
      text = rng.choice(LANGUAGES) + rng.choice(["", " "]) + text
    if rng.random() < 0.1:
      text = rng.choice([" ", "  ", "\t"]) + text + rng.choice(["", " ", "\n"])
    if rng.random() < 0.1:
      text = text.capitalize() + rng.choice([".", "?", "!", " ,", " ."])
    texts.append(text)
  return texts


def train_spm(prefix, sentences, vocab_size, normalization):
  sentencepiece.SentencePieceTrainer.train(
    sentence_iterator=iter(sentences),
    model_prefix=prefix,
    vocab_size=vocab_size,
    character_coverage=1.0,
    hard_vocab_limit=False,
    normalization_rule_name=normalization,
    minloglevel=2,
  )
  return prefix + ".model"


def spm_pieces(path):
  model = sentencepiece.SentencePieceProcessor(model_file=path)
  return [
    model.id_to_piece(i)
    for i in range(model.get_piece_size())
    if not (model.is_control(i) or model.is_unknown(i))
  ]


def make_vocab(pieces, extra=(), size=None):
  """OPUS-MT's order: </s> 0, <unk> 1, the pieces, `extra`, filler pieces up to `size`, <pad>."""
  vocab = {"</s>": 0, "<unk>": 1}
  for piece in list(pieces) + list(extra):
    vocab.setdefault(piece, len(vocab))
  while size is not None and len(vocab) < size - 1:
    vocab.setdefault(f"\u2581filler{len(vocab)}", len(vocab))
  vocab["<pad>"] = len(vocab)
  return vocab


def randomize(model, seed, std=0.25, eos_boost=0.0):
  """Weights that make the model's answer depend on its input (the default init is nearly
  uniform), and a random final_logits_bias (`calibrate_end` then sets END's)."""
  generator = torch.Generator().manual_seed(seed)
  with torch.no_grad():
    for name, parameter in model.named_parameters():
      if "embed_positions" in name:  # the sinusoids: computed, never saved
        continue
      noise = torch.randn(parameter.shape, generator=generator)
      if "layer_norm" in name and name.endswith("weight"):
        parameter.copy_(1 + 0.1 * noise)
      else:
        parameter.copy_(std * noise)
    bias = torch.randn(model.final_logits_bias.shape, generator=generator)
    bias[0, model.config.eos_token_id] += eos_boost
    model.final_logits_bias.copy_(bias)


# name -> (MarianConfig fields, spm sizes (source, target), separate vocabularies, languages,
# the source spm's normalization, tokenizer model_max_length)
CHECKPOINTS = {
  "shared": (
    dict(
      d_model=16,
      encoder_attention_heads=4,
      decoder_attention_heads=4,
      encoder_layers=2,
      decoder_layers=2,
      encoder_ffn_dim=32,
      decoder_ffn_dim=32,
    ),
    (60, 60),
    False,
    (),
    "nmt_nfkc",
    40,
  ),
  "separate": (
    dict(
      d_model=16,
      encoder_attention_heads=2,
      decoder_attention_heads=2,
      encoder_layers=1,
      decoder_layers=2,
      encoder_ffn_dim=24,
      decoder_ffn_dim=24,
      share_encoder_decoder_embeddings=False,
    ),
    (50, 70),
    True,
    (),
    "identity",
    40,
  ),
  "multilingual": (
    dict(
      d_model=16,
      encoder_attention_heads=4,
      decoder_attention_heads=4,
      encoder_layers=1,
      decoder_layers=1,
      encoder_ffn_dim=32,
      decoder_ffn_dim=32,
    ),
    (60, 60),
    False,
    LANGUAGES,
    "identity",
    40,
  ),
  "odd": (
    dict(
      d_model=21,
      encoder_attention_heads=3,
      decoder_attention_heads=3,
      encoder_layers=1,
      decoder_layers=3,
      encoder_ffn_dim=37,
      decoder_ffn_dim=37,
      tie_word_embeddings=False,
    ),
    (55, 45),
    False,
    (),
    "identity",
    33,
  ),
}
BASE = (
  dict(
    d_model=512,
    encoder_attention_heads=8,
    decoder_attention_heads=8,
    encoder_layers=6,
    decoder_layers=6,
    encoder_ffn_dim=2048,
    decoder_ffn_dim=2048,
  ),
  (400, 400),
  False,
  (),
  "nmt_nfkc",
  512,
)
BASE_VOCAB = 58101


def calibrate_end(model, tokenizer, texts):
  """Sets END's output bias where greedy outputs end at the most different lengths: a random
  model either says END at once or repeats one piece to the limit, and only near the boundary
  do both happen, so the searches' finishing rules are exercised at every length."""
  batch = tokenizer(texts, return_tensors="pt", padding=True, truncation=True)
  eos = model.config.eos_token_id
  base = float(model.final_logits_bias[0, eos])
  best = (-1, 0.0)
  with torch.no_grad():
    for boost in np.arange(0.0, 10.0, 0.25):
      model.final_logits_bias[0, eos] = base + boost
      ids = model.generate(**batch, num_beams=1).numpy()[:, 1:]
      lengths = set(np.where((ids == eos).any(1), (ids == eos).argmax(1), -1))
      best = max(best, (len(lengths), boost))
    model.final_logits_bias[0, eos] = base + best[1]
  return best[1]


def make_checkpoint(out_dir, name, spec, texts, seed, vocab_size=None, std=0.25):
  fields, (source_size, target_size), separate, languages, normalization, limit = spec
  folder = os.path.join(out_dir, name)
  os.makedirs(folder, exist_ok=True)
  rng = random.Random(seed)
  english = [" ".join(rng.choice(ENGLISH) for _ in range(8)) for _ in range(300)]
  german = [" ".join(rng.choice(GERMAN) for _ in range(8)) for _ in range(300)]
  with tempfile.TemporaryDirectory() as scratch:
    source_spm = train_spm(os.path.join(scratch, "source"), english, source_size, normalization)
    # nmt_nfkc's rules weigh ~240 KB a model: the source side only (it is what normalizes).
    target_spm = train_spm(os.path.join(scratch, "target"), german, target_size, "identity")
    if separate:
      # One size for both, so <pad> has one id (transformers' MarianTokenizer takes the pad id
      # from the source vocabulary; the import refuses vocabularies whose pad ids differ).
      size = 2 + max(len(spm_pieces(source_spm)) + len(languages), len(spm_pieces(target_spm))) + 1
      source_vocab = make_vocab(spm_pieces(source_spm), languages, size)
      target_vocab = make_vocab(spm_pieces(target_spm), (), size)
    else:
      source_vocab = target_vocab = make_vocab(
        spm_pieces(source_spm) + spm_pieces(target_spm), languages, vocab_size
      )
    for file, vocab in (("vocab.json", source_vocab), ("target_vocab.json", target_vocab)):
      if file == "vocab.json" or separate:
        with open(os.path.join(scratch, file), "w") as f:
          json.dump(vocab, f, ensure_ascii=False, indent=2)
    tokenizer = MarianTokenizer(
      source_spm=source_spm,
      target_spm=target_spm,
      vocab=os.path.join(scratch, "vocab.json"),
      target_vocab_file=os.path.join(scratch, "target_vocab.json") if separate else None,
      separate_vocabs=separate,
      model_max_length=limit,
    )
    tokenizer.save_pretrained(folder)
  pad = source_vocab["<pad>"]
  config = MarianConfig(
    vocab_size=len(source_vocab),
    decoder_vocab_size=len(target_vocab),
    max_position_embeddings=max(limit, GENERATE_MAX_LENGTH, 64),
    activation_function="swish",
    scale_embedding=True,
    pad_token_id=pad,
    decoder_start_token_id=target_vocab["<pad>"],
    eos_token_id=0,
    forced_eos_token_id=0,
    dropout=0.1,
    **fields,
  )
  if separate:
    config.pad_token_id = pad
  torch.manual_seed(seed)
  model = MarianMTModel(config).eval()
  randomize(model, seed, std=std)
  calibration = [t for t in texts[100:160] if t.strip()][:30]
  model.generation_config = GenerationConfig(
    bad_words_ids=[[target_vocab["<pad>"]]],
    decoder_start_token_id=target_vocab["<pad>"],
    eos_token_id=0,
    forced_eos_token_id=0,
    max_length=GENERATE_MAX_LENGTH,
    num_beams=4,
    pad_token_id=target_vocab["<pad>"],
    renormalize_logits=True,
  )
  calibrate_end(model, MarianTokenizer.from_pretrained(folder), calibration)
  model.save_pretrained(folder)
  expected(folder, model, MarianTokenizer.from_pretrained(folder), texts, seed)
  return folder


def _ragged(rows):
  """A list of int lists -> (flat values, int32 row lengths); int16 values where they fit."""
  values = np.array([i for row in rows for i in row], np.int32)
  return (
    values.astype(np.int16) if values.size and values.max() < 2**15 else values,
    np.array([len(row) for row in rows], np.int32),
  )


def _labels(encoding):
  """A text_target= encoding's ids (transformers 5 names them input_ids when no text is given)."""
  return encoding["labels"] if "labels" in encoding else encoding["input_ids"]


def generate_answers(model, tokenizer, texts, **settings):
  batch = tokenizer(texts, return_tensors="pt", padding=True, truncation=True)
  with torch.no_grad():
    ids = model.generate(**batch, **settings)
  return ids.numpy(), tokenizer.batch_decode(ids, skip_special_tokens=True)


def expected(folder, model, tokenizer, texts, seed):
  out = {}
  out["source_ids"], out["source_lengths"] = _ragged(
    [tokenizer(text, truncation=True)["input_ids"] for text in texts]
  )
  out["target_ids"], out["target_lengths"] = _ragged(
    [_labels(tokenizer(text_target=text, truncation=True)) for text in texts[:TARGET_TEXTS]]
  )
  rng = np.random.default_rng(seed)
  vocab = model.config.decoder_vocab_size
  rows = [list(rng.integers(0, vocab, rng.integers(0, 12))) for _ in range(DECODE_ROWS)]
  out["decode_ids"], out["decode_lengths"] = _ragged(rows)
  decoded = [tokenizer.decode(row, skip_special_tokens=True) for row in rows]
  chosen = [texts[i] for i in (20, 0, 31, 58, 66, 47)]  # mixed lengths, one empty
  forward = chosen[:3]  # short ones: the logits are the fixture's largest array
  batch = tokenizer(forward, return_tensors="pt", padding=True, truncation=True)
  target = tokenizer(text_target=forward, return_tensors="pt", padding=True, truncation=True)
  decoder_input = model.prepare_decoder_input_ids_from_labels(_labels(target))
  with torch.no_grad():
    result = model(**batch, decoder_input_ids=decoder_input)
  out["forward_source"] = batch["input_ids"].numpy()
  out["forward_decoder_input"] = decoder_input.numpy()
  out["forward_encoder"] = result.encoder_last_hidden_state.numpy()
  out["forward_logits"] = result.logits.numpy()
  answers = {}
  for search, beams in (("greedy", 1), ("beam", 4)):
    mixed_ids, mixed_text = generate_answers(model, tokenizer, chosen, num_beams=beams)
    out[f"{search}_mixed_ids"] = mixed_ids
    answers[f"{search}_mixed_text"] = mixed_text
    alone = [generate_answers(model, tokenizer, [text], num_beams=beams) for text in chosen[:3]]
    for i, (ids, text) in enumerate(alone):
      out[f"{search}_alone{i}_ids"] = ids
      answers[f"{search}_alone{i}_text"] = text
  never_ids, never_text = generate_answers(
    model, tokenizer, chosen, num_beams=4, early_stopping="never"
  )
  out["beam_never_mixed_ids"] = never_ids
  answers["beam_never_mixed_text"] = never_text
  np.savez_compressed(os.path.join(folder, "expected.npz"), **out)
  with open(os.path.join(folder, "expected.json"), "w") as f:
    json.dump(
      {"decode_text": decoded, "generate_texts": chosen, **answers}, f, ensure_ascii=False, indent=1
    )


def _import_reference():
  global sentencepiece, torch, GenerationConfig, MarianConfig, MarianMTModel, MarianTokenizer
  try:
    import sentencepiece
    import torch
    from transformers import GenerationConfig, MarianConfig, MarianMTModel, MarianTokenizer
  except ImportError as error:
    raise cli.UsageError(
      f"{error.name} is not installed here: run this with the reference venv "
      "(pip install -r requirements-marian-reference.txt; make check-marian)"
    ) from None


def main(argv):
  del argv
  from absl import flags

  args = flags.FLAGS
  if not args.out_dir:
    raise cli.UsageError("--out_dir is required")
  _import_reference()
  os.makedirs(args.out_dir, exist_ok=True)
  texts = make_texts()
  with open(os.path.join(args.out_dir, "texts.txt"), "w") as f:
    f.write("".join(json.dumps(text, ensure_ascii=False) + "\n" for text in texts))
  if not args.only_base:
    for seed, (name, spec) in enumerate(CHECKPOINTS.items()):
      print("made", make_checkpoint(args.out_dir, name, spec, texts, seed))
  if args.base or args.only_base:
    folder = make_checkpoint(args.out_dir, "base", BASE, texts, 7, BASE_VOCAB, std=0.05)
    print("made", folder)


if __name__ == "__main__":
  cli.define_flags(ReferenceFlags)
  cli.run(main)
