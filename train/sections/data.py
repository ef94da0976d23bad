"""The data section: what a run learns from and how its examples become batches. Its parts
apply to one kind of task each and are None otherwise: `tfds` (split slices), `tsv` (what a
TSV line is) and `text` (how plain text is packed)."""

import dataclasses
from typing import Optional

import settings
from tfattn.kinds import MODEL_KINDS, SEQ2SEQ
from train.flag_choices import (
  TASK_NAMES,
  TEXT,
  TEXT_BLOCKS,
  TEXT_DOCUMENTS,
  TEXT_LINES,
  TEXT_PACKINGS,
  TFDS_TASKS,
  TSV,
)
from train.sections.declare import MAY_CHANGE, MUST_MATCH, run_setting

TRUNCATE_SIDES = ("right", "left")


def _split_before_roles(saved, name):
  """A TFDS run saved before the three data roles: the split it trained or evaluated on."""
  if saved.get("task") not in TFDS_TASKS:
    return None
  from train.tfds_tasks import splits_before_roles

  return splits_before_roles(saved["task"])[name]


@dataclasses.dataclass(frozen=True)
class TfdsSplits:
  """TFDS tasks: the split slice of each data role."""

  train_split: Optional[str] = run_setting(
    None,
    "TFDS tasks: the training split slice, e.g. 'train[:90%]' (default: the dataset's).",
    unset="",
    when_missing=lambda saved: _split_before_roles(saved, "train_split"),
    resume=MUST_MATCH,
  )
  validation_split: Optional[str] = run_setting(
    None,
    "TFDS tasks: the validation split slice, e.g. 'train[90%:]' (default: the "
    "dataset's: IMDB holds out the last 10% of train, translation sets their validation "
    "split).",
    unset="",
    when_missing=lambda saved: _split_before_roles(saved, "validation_split"),
    resume=MUST_MATCH,
  )
  test_split: Optional[str] = run_setting(
    None,
    "TFDS tasks: the test split slice, judged once at the end ('' = none; default: the "
    "dataset's test split).",
    unset="",
    when_missing=lambda saved: _split_before_roles(saved, "test_split"),
    resume=MAY_CHANGE,
  )


@dataclasses.dataclass(frozen=True)
class TsvData:
  """--task=tsv: what a line is, and what a bad one does."""

  tsv_kind: str = run_setting(
    SEQ2SEQ,
    "What the TSV's second column is: the target text (seq2seq) or an integer label "
    "(classification); a language model's line is one column, its text (TFRecords: a `text` "
    "feature).",
    choices=tuple(MODEL_KINDS),
    resume=MUST_MATCH,
  )
  bad_lines: str = run_setting(
    "fail",
    "TSV files: a bad line (not UTF-8, not 2 tab-separated fields, a bad label) stops the run "
    "naming file:line (fail), or is dropped and counted on stderr (skip). Training files are "
    "checked as they stream: their first 1000 lines before the run starts.",
    choices=("fail", "skip"),
    resume=MAY_CHANGE,
  )


@dataclasses.dataclass(frozen=True)
class TextData:
  """--task=text: the language model's text files (docs/language_model.md)."""

  text_packing: str = run_setting(
    TEXT_BLOCKS,
    "--task=text: blocks: the text is one token stream cut into blocks of --max_length "
    "(nanoGPT; attention crosses documents, [END] between them); documents: the same blocks, "
    "but attention and positions restart at each document (segment ids); lines: one example "
    "a line, cut at --max_length (short texts).",
    choices=TEXT_PACKINGS,
    when_missing=TEXT_LINES,  # runs saved before packing read one text a line
    resume=MUST_MATCH,
  )
  text_documents: str = run_setting(
    "file",
    "--task=text packed: what one document is: a whole file (its newlines are text), or a "
    "line (blank lines skipped).",
    choices=("file", "line"),
    resume=MUST_MATCH,
  )

  def check(self, attention_window: Optional[int]) -> None:
    if self.text_packing == TEXT_DOCUMENTS and attention_window:
      raise ValueError(
        "--text_packing=documents masks attention per document, which a windowed attention "
        "does not take: use --text_packing=blocks with --attention_window"
      )


@dataclasses.dataclass(frozen=True)
class Data:
  """The data section (see the module)."""

  task: str = run_setting(
    "numbers",
    "What to learn. Built-in tasks are generated offline from --seed; TFDS tasks "
    "read tensorflow-datasets; tsv reads --train_file, --validation_file, --test_file, and "
    "so does text (plain text files: a language model, docs/language_model.md).",
    choices=TASK_NAMES,
    resume=MUST_MATCH,
  )
  builtin_train_examples: int = run_setting(
    50_000,
    "Built-in tasks: training examples drawn from --seed (validation and test hold out 1,000 "
    "each). Fewer make each start and checkpoint cheaper (a checkpoint keeps the shuffle "
    "buffer, which holds them all).",
    above=0,
    when_missing=50_000,  # runs saved before the setting existed
    resume=MUST_MATCH,
  )
  data_dir: Optional[str] = run_setting(
    None,
    "tensorflow-datasets data directory.",
    unset="TFDS's own (~/tensorflow_datasets)",
    resume=MAY_CHANGE,
  )
  train_file: Optional[str] = run_setting(
    None,
    "Training file(s). --task=tsv: TSV lines, source<TAB>target or text<TAB>label (or "
    "TFRecords); --task=text: plain text (see --text_packing).",
    unset="",
    resume=MUST_MATCH,
  )
  validation_file: Optional[str] = run_setting(
    None,
    "Validation file, in --train_file's format: in-run evaluation and checkpoint choice "
    "(alias --eval_file). Without it, validation reads the first 1000 training lines.",
    unset="",
    old_names=("eval_file",),  # before the three data roles
    resume=MUST_MATCH,
  )
  test_file: Optional[str] = run_setting(
    None,
    "Test file, in --train_file's format, judged once at the end on the weights that get "
    "exported. Without it, the run has no test number.",
    unset="",
    resume=MAY_CHANGE,
  )
  batch_size: Optional[int] = run_setting(
    None, "Global batch size (all replicas).", above=0, resume=MUST_MATCH
  )
  batch_tokens: Optional[int] = run_setting(
    None,
    "Token-based batching: each batch holds as many examples of its length bucket as "
    "fit this many padded tokens (the paper: ~25k); replaces --batch_size for training.",
    above=0,
    resume=MUST_MATCH,
  )
  pack_examples: Optional[bool] = run_setting(
    None,
    "Seq2seq training: pack several (source, target) pairs into each row, each pair "
    "attending only to itself with its own positions, so far fewer tokens are padding "
    "(tensor2tensor's and Flax's packing). Rows are the shortest batch length that holds 99% "
    "of the first 2,000 training pairs (the longer pairs: rows of --max_length). A batch "
    "holds --batch_tokens tokens a side, or --batch_size rows of --max_length. Validation "
    "and test are not packed. Not with --attention_window.",
    when_unset=False,
    when_missing=False,  # saved before packing existed: unpacked
    resume=MUST_MATCH,
  )
  truncate: Optional[str] = run_setting(
    None,
    "Classification: which end of a long text is cut off; left keeps the last "
    "max_length tokens (reviews end with their verdict).",
    choices=TRUNCATE_SIDES,
    when_unset="right",
    resume=MUST_MATCH,
  )
  # The parts of one kind of task each: None for the others.
  tfds: Optional[TfdsSplits] = settings.part(TfdsSplits)
  tsv: Optional[TsvData] = settings.part(TsvData)
  text: Optional[TextData] = settings.part(TextData)

  def __post_init__(self):
    if self.task not in TFDS_TASKS and self.tfds is not None:
      for name, value in dataclasses.asdict(self.tfds).items():
        if value is not None:
          raise ValueError(f"--{name} applies to TFDS tasks only (--task={self.task})")
    for name, applies in (("tfds", self.task in TFDS_TASKS), ("tsv", self.task == TSV)):
      if not applies:
        object.__setattr__(self, name, None)
    if self.task != TEXT:
      object.__setattr__(self, "text", None)

  def check(self, kind: Optional[str], max_length: Optional[int], window: Optional[int]) -> None:
    """The rules among the data settings, the model's length and attention window, and the
    task's kind (None: not known yet)."""
    if self.batch_tokens and max_length and self.batch_tokens < max_length:
      raise ValueError(
        f"--batch_tokens ({self.batch_tokens}) must hold at least one "
        f"--max_length ({max_length}) example"
      )
    if kind is not None and self.pack_examples and not MODEL_KINDS[kind].packs_pairs:
      raise ValueError(f"--pack_examples packs translation pairs (seq2seq tasks), not {kind}")
    if self.pack_examples and window:
      raise ValueError(
        "--pack_examples needs full attention: the windowed attention (--attention_window) "
        "cannot keep packed pairs apart"
      )
    if self.text is not None:
      self.text.check(window)

  def for_kind(self, kind: str) -> "Data":
    """Without what the kind does not read (`truncate` is the truncating kinds')."""
    return self if MODEL_KINDS[kind].truncates else dataclasses.replace(self, truncate=None)
