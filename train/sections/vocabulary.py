"""The vocabulary section: how the run's tokenizers are learned (`train/vocabularies.py`)."""

import dataclasses
from typing import Optional

from tfattn.kinds import MODEL_KINDS
from train.flag_choices import TOKENIZERS
from train.sections.declare import MUST_MATCH, run_setting


@dataclasses.dataclass(frozen=True)
class Vocabulary:
  """The vocabulary section."""

  tokenizer: Optional[str] = run_setting(
    None,
    "The vocabulary: sentencepiece: lossless subwords (case, spacing, punctuation kept, NFKC); "
    "wordpiece: case-folded words; char: one id per character of the training text, exact "
    "(unseen characters are [UNK]); byte: one id per UTF-8 byte, exact, 260 ids, no [UNK].",
    choices=TOKENIZERS,
    when_unset="sentencepiece",
    resume=MUST_MATCH,
  )
  lower_case: Optional[bool] = run_setting(
    None,
    "Case-fold text before SentencePiece (classification tasks do); char and byte keep text "
    "exactly.",
    when_unset=False,
    resume=MUST_MATCH,
  )
  vocab_size: Optional[int] = run_setting(
    None,
    "Vocabulary size; char: at most this many ids (the commonest characters kept); byte: "
    "always 260.",
    above=0,
    resume=MUST_MATCH,
  )
  character_coverage: Optional[float] = run_setting(
    None,
    "SentencePiece: the share of the training text's characters that get a piece of their "
    "own; the rest are spelled in bytes when --vocab_size >= 512, else they are [UNK] (the "
    "run's start says how many). 1 keeps every character.",
    above=0,
    maximum=1,
    when_unset=0.9995,  # SentencePiece's default, what runs saved before the setting used
    resume=MUST_MATCH,
  )
  shared_vocabulary: Optional[bool] = run_setting(
    None,
    "Seq2seq: one vocabulary learned from source and target text together, and one embedding "
    "table for the encoder input, the decoder input and the output layer (the paper's "
    "three-way tying).",
    when_unset=False,
    resume=MUST_MATCH,
  )
  vocab_examples: Optional[int] = run_setting(
    None, "Training examples the vocabulary is learned from.", above=0, resume=MUST_MATCH
  )

  def check(self, kind: Optional[str]) -> None:
    if kind is not None and self.shared_vocabulary and not MODEL_KINDS[kind].shares_vocabulary:
      raise ValueError(f"--shared_vocabulary is for seq2seq tasks (one side), not {kind}")

  def for_kind(self, kind: str) -> "Vocabulary":
    """Without `shared_vocabulary` for a kind of one vocabulary."""
    if MODEL_KINDS[kind].shares_vocabulary:
      return self
    return dataclasses.replace(self, shared_vocabulary=None)
