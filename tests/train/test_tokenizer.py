"""train/tokenizer.py: learning vocabularies, and what the learning says about [UNK]."""

import collections
import logging

import pytest
import tensorflow as tf

from tfattn import text
from train import tokenizer
from train.run_config import RunConfig

# A text whose rare characters (as in tiny Shakespeare: Z, X, $, &, 3) are a sliver of it.
COMMON = "the quick brown fox jumps over the lazy dog\n"
TEXT = [COMMON * 3] * 400 + ["Zebra X$&3\n"]


def _dataset(texts=TEXT):
  return tf.data.Dataset.from_tensor_slices(texts)


def _counts(texts=TEXT):
  return collections.Counter("".join(texts))


def test_a_small_sentencepiece_vocabulary_says_which_characters_become_unk(tmp_path, caplog):
  caplog.set_level(logging.INFO, logger="absl")
  path = tokenizer.learn_and_write("sentencepiece", _dataset(), 60, str(tmp_path / "small"))
  unknown = tokenizer.unknown_characters(text.load_tokenizer(path), _counts())
  assert sorted(c for c, _ in unknown) == sorted("Z$&3X")  # below 512: no byte fallback
  assert all(n == 1 for _, n in unknown)
  # Our warnings only: TensorFlow's own (a retracing notice, after other tests in this process
  # built tokenizers) are not ours to judge.
  warned = [
    r.getMessage() for r in caplog.records if r.name == "absl" and r.levelno == logging.WARNING
  ]
  total = sum(_counts().values())
  assert len(warned) == 1 and f"5 of the {total:,} characters of the learning text" in warned[0]
  assert "'Z' x1" in warned[0] and "--character_coverage=1" in warned[0]


def test_character_coverage_one_keeps_every_character(tmp_path):
  path = tokenizer.learn_and_write(
    "sentencepiece", _dataset(), 60, str(tmp_path / "all"), character_coverage=1.0
  )
  tok = text.load_tokenizer(path)
  assert tokenizer.unknown_characters(tok, _counts()) == []
  ids = tok.tokenize(["Zebra X$&3"])
  assert tok.detokenize(ids.to_tensor()).numpy()[0].decode() == "Zebra X$&3"


def test_a_vocab_size_too_small_for_the_characters_fails_with_one_line_of_ours(tmp_path):
  with pytest.raises(ValueError) as error:
    tokenizer.learn_and_write(
      "sentencepiece", _dataset(), 20, str(tmp_path / "tiny"), character_coverage=1.0
    )
  message = str(error.value)
  assert "\n" not in message and message.startswith("--vocab_size=20 is too small")
  distinct = len(_counts())
  assert f"need at least {distinct + len(text.RESERVED_TOKENS)};" in message
  assert "--tokenizer=char" in message
  assert not (tmp_path / "tiny.model").exists()


def test_a_character_vocabulary_keeps_the_commonest_and_counts_the_rest(tmp_path, caplog):
  caplog.set_level(logging.INFO, logger="absl")
  room = len(set(COMMON))
  path = tokenizer.learn_and_write(
    "char", _dataset(), len(text.RESERVED_TOKENS) + room, str(tmp_path / "chars")
  )
  assert path.endswith(".chars")
  tok = text.load_tokenizer(path)
  assert tok.vocab_size == len(text.RESERVED_TOKENS) + room
  unknown = tokenizer.unknown_characters(tok, _counts())
  assert sorted(c for c, _ in unknown) == sorted(set("Zebra X$&3") - set(COMMON))
  # Our warnings only: TensorFlow's own (a retracing notice, after other tests in this process
  # built tokenizers) are not ours to judge.
  warned = [
    r.getMessage() for r in caplog.records if r.name == "absl" and r.levelno == logging.WARNING
  ]
  assert (
    len(warned) == 1 and f"map to [UNK] ({len(unknown)} of {len(_counts())} distinct" in (warned[0])
  )
  assert f"--vocab_size >= {len(_counts()) + len(text.RESERVED_TOKENS)}" in warned[0]


def test_a_character_vocabulary_with_room_has_no_unk_and_says_so(tmp_path, caplog):
  caplog.set_level(logging.INFO, logger="absl")
  path = tokenizer.learn_and_write("char", _dataset(), 1000, str(tmp_path / "chars"))
  assert text.load_tokenizer(path).vocab_size == len(text.RESERVED_TOKENS) + len(_counts())
  said = [r.getMessage() for r in caplog.records if "[UNK]" in r.getMessage()]
  assert len(said) == 1 and "none maps to [UNK]" in said[0]


def test_a_character_vocabulary_needs_characters_and_room(tmp_path):
  with pytest.raises(ValueError, match="no characters"):
    tokenizer.learn_and_write("char", _dataset([""]), 100, str(tmp_path / "a"))
  with pytest.raises(ValueError, match="leaves no id for a character"):
    tokenizer.learn_and_write("char", _dataset(), 4, str(tmp_path / "b"))


def test_a_byte_vocabulary_reads_no_text(tmp_path):
  path = tokenizer.learn_and_write("byte", iter(()), 5, str(tmp_path / "bytes"))
  assert path.endswith(".bytes") and text.load_tokenizer(path).vocab_size == 260


def test_a_run_saved_before_the_settings_learned_as_it_did():
  """A run_config.json without character_coverage (saved before issue 41) resumes with
  SentencePiece's default, the value it learned its vocabulary with."""
  saved = RunConfig.of(task="text", tokenizer="sentencepiece").resolved().flat()
  del saved["character_coverage"]
  restored = RunConfig.from_saved(saved).resolved().vocabulary
  assert restored.character_coverage == tokenizer.DEFAULT_CHARACTER_COVERAGE == 0.9995
  assert restored.tokenizer == "sentencepiece"
