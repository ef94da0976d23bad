"""`RunConfig`: everything a training run is started with, each setting declared once.

A field's declaration holds its type, default, help, allowed values or range, what an unset
value becomes (`when_unset`), what a run saved before the field existed meant (`when_missing`),
and its **resume policy** (`resume=`): whether a resumed run must match
the saved value (it decides what is learned), may change it, or follows the machine it resumes
on. The flags of `python -m train` (`cli.define_flags`), the value checks (`RunConfig.check`)
and the resume rules (`train/resume.py`) are all derived from these declarations: a new
setting is one field here. A setting of the model is `TransformerConfig`'s declaration,
referred to (`model_setting`): its bounds and choices are not restated, and `model_config()`
hands every set one to the model. Decoding choices are `DecodeOptions` fields, carried as `decode`.

The resolved configuration is saved as the run's `run_config.json`.
"""

import dataclasses
import json
from typing import Any, Dict, Optional

import settings
from tfattn.config import PRESETS, TransformerConfig
from tfattn.decode_options import BEAM, DECODE_MODES, GREEDY, SAMPLE, DecodeOptions
from tfattn.kinds import MODEL_KINDS, SEQ2SEQ
from train import recipes
from train.files import write_json_atomically
from train.flag_choices import (
  CPU_STEPS_PER_LOOP,
  GPU_STEPS_PER_LOOP,
  STRATEGIES,
  TASK_NAMES,
  TEXT_BLOCKS,
  TEXT_LINES,
  TEXT_PACKINGS,
  TFDS_TASKS,
  TOKENIZERS,
)

# Resume policies.
MUST_MATCH = "must match"  # decides what is learned: a resumed run must keep the value
MAY_CHANGE = "may change"  # how long, how often, how it is judged or exported
FOLLOWS_MACHINE = "follows the machine"  # devices and precision: this command's value
RESUME_POLICIES = (MUST_MATCH, MAY_CHANGE, FOLLOWS_MACHINE)

SCHEDULES = ("noam", "rsqrt", "cosine", "constant")
FREEZE_CHOICES = ("none", "embeddings", "encoder")
OPTIMIZERS = ("adam", "adamw")
TRUNCATE_SIDES = ("right", "left")
PRECISIONS = ("auto", "float32", "mixed_float16", "mixed_bfloat16")
COMPUTE_DTYPES = {"float32": "float32", "mixed_float16": "float16", "mixed_bfloat16": "bfloat16"}
# Model sizes an explicit --model preset keeps (the recipe's and task's are not applied).
MODEL_SIZE_FIELDS = ("d_model", "num_heads", "dff", "num_layers")


def run_setting(default, help: str, *, resume: str, **checks):
  """A RunConfig field: `settings.setting` plus its resume policy (required)."""
  if resume not in RESUME_POLICIES:
    raise ValueError(f"resume policy must be one of {RESUME_POLICIES}, got {resume!r}")
  return settings.setting(default, help, resume=resume, **checks)


def model_setting(name: str, help=None, *, resume: str, default=None, to=None, **own):
  """A RunConfig field that sets `TransformerConfig.<name>` (or the fields `to` names): its
  choices and bounds are the model's declaration (`settings.refer`); default None: the recipe's,
  then the task's, then the preset's value."""
  if resume not in RESUME_POLICIES:
    raise ValueError(f"resume policy must be one of {RESUME_POLICIES}, got {resume!r}")
  return settings.refer(TransformerConfig, name, default, help=help, to=to, resume=resume, **own)


def _split_before_roles(saved, name):
  """A TFDS run saved before the three data roles: the split it trained or evaluated on."""
  if saved.get("task") not in TFDS_TASKS:
    return None
  from train.tfds_tasks import splits_before_roles

  return splits_before_roles(saved["task"])[name]


def resume_policy(field: dataclasses.Field) -> str:
  return settings.spec_of(field).extra.get("resume")


@dataclasses.dataclass
class RunConfig:
  """The settings of one training run (None: the recipe's, then the task's value, then the
  declared fallback)."""

  run_dir: str = run_setting(
    "runs/default",
    "Run directory: config, vocabularies, checkpoints, logs. Reuse it to resume.",
    resume=FOLLOWS_MACHINE,
  )
  # Data.
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
  bad_lines: str = run_setting(
    "fail",
    "TSV files: a bad line (not UTF-8, not 2 tab-separated fields, a bad label) stops the run "
    "naming file:line (fail), or is dropped and counted on stderr (skip). Training files are "
    "checked as they stream: their first 1000 lines before the run starts.",
    choices=("fail", "skip"),
    resume=MAY_CHANGE,
  )
  tsv_kind: str = run_setting(
    SEQ2SEQ,
    "What the TSV's second column is: the target text (seq2seq) or an integer label "
    "(classification); a language model's line is one column, its text (TFRecords: a `text` "
    "feature).",
    choices=tuple(MODEL_KINDS),
    resume=MUST_MATCH,
  )
  # The language model's text files (--task=text), docs/language_model.md.
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
  recipe: Optional[str] = run_setting(
    None,
    recipes.help_text(),
    choices=tuple(sorted(recipes.RECIPES)),
    unset="none",
    resume=MAY_CHANGE,
  )
  # Model: a preset, optionally resized.
  model: Optional[str] = run_setting(
    None, "Model size preset.", choices=tuple(PRESETS), resume=MUST_MATCH
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
  norm_position: Optional[str] = model_setting(
    "norm_position", when_unset="post", resume=MUST_MATCH
  )
  classifier_body: Optional[str] = model_setting("classifier_body", resume=MUST_MATCH)
  attention_window: Optional[int] = model_setting(
    "attention_window", unset="full attention", resume=MUST_MATCH
  )
  dropout: Optional[float] = model_setting("dropout_rate", resume=MUST_MATCH)
  attention_dropout: Optional[float] = model_setting(
    "attention_dropout_rate",
    when_unset=0.0,
    when_missing=0.0,  # saved before the field existed: attention weights were never dropped
    resume=MUST_MATCH,
  )
  feed_forward_dropout: Optional[float] = model_setting(
    "feed_forward_dropout_rate",
    when_unset=0.0,
    # Saved before the field existed: the feed-forward hidden layer dropped at `dropout`.
    when_missing=lambda saved: saved.get("dropout"),
    resume=MUST_MATCH,
  )
  # Text.
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
  max_length: Optional[int] = model_setting("max_length", resume=MUST_MATCH)
  truncate: Optional[str] = run_setting(
    None,
    "Classification: which end of a long text is cut off; left keeps the last "
    "max_length tokens (reviews end with their verdict).",
    choices=TRUNCATE_SIDES,
    when_unset="right",
    resume=MUST_MATCH,
  )
  # Optimisation.
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
  grad_accum_steps: Optional[int] = run_setting(
    None,
    "Micro-batches per optimizer step (gradient accumulation): a large effective batch on one GPU.",
    above=0,
    when_unset=1,
    resume=MUST_MATCH,
  )
  train_steps: Optional[int] = run_setting(
    None, "Total optimizer steps.", minimum=0, resume=MAY_CHANGE
  )
  schedule: Optional[str] = run_setting(
    None,
    "Learning-rate schedule: noam (the paper's; peak depends on d_model), or a linear "
    "warm-up to --learning_rate then rsqrt decay, cosine decay to 0, or constant.",
    choices=SCHEDULES,
    when_unset="noam",
    resume=MUST_MATCH,
  )
  learning_rate: Optional[float] = run_setting(
    None,
    "noam: scale on the schedule; rsqrt/cosine/constant: the peak learning rate.",
    above=0,
    resume=MUST_MATCH,
  )
  warmup_steps: Optional[int] = run_setting(None, "Warm-up steps.", minimum=0, resume=MUST_MATCH)
  label_smoothing: Optional[float] = run_setting(
    None, "Label smoothing epsilon.", minimum=0, below=1, when_unset=0.1, resume=MUST_MATCH
  )
  clip_norm: Optional[float] = run_setting(
    None,
    "Global gradient-norm clip; 0 disables.",
    minimum=0,
    when_unset=0.0,  # unset until resolved, so a recipe can set it
    resume=MUST_MATCH,
  )
  # Choices of today's practice (issue 41): positions, activation, the embeddings'
  # initialisation, AdamW, a learning-rate floor.
  position_encoding: Optional[str] = model_setting(
    "position_encoding", when_unset="sinusoidal", resume=MUST_MATCH
  )
  activation: Optional[str] = model_setting("activation", when_unset="relu", resume=MUST_MATCH)
  embedding_init: Optional[str] = model_setting(
    "embedding_init", when_unset="paper", resume=MUST_MATCH
  )
  # What a Marian / OPUS-MT model differs in (issue 50), usable from scratch too.
  sinusoid_layout: Optional[str] = model_setting(
    "sinusoid_layout", when_unset="interleaved", resume=MUST_MATCH
  )
  output_bias: Optional[bool] = model_setting("output_bias", when_unset=False, resume=MUST_MATCH)
  layer_norm_epsilon: Optional[float] = model_setting(
    "layer_norm_epsilon", when_unset=1e-6, resume=MUST_MATCH
  )
  decoder_start_id: Optional[int] = model_setting("decoder_start_id", resume=MUST_MATCH)
  optimizer: Optional[str] = run_setting(
    None,
    "adam: Adam (beta_1 0.9, epsilon 1e-9: the paper's); adamw: the same with decoupled "
    "weight decay (--weight_decay) on weight matrices and embedding tables, not on biases or "
    "layer-norm parameters (nanoGPT's rule).",
    choices=OPTIMIZERS,
    when_unset="adam",
    resume=MUST_MATCH,
  )
  weight_decay: Optional[float] = run_setting(
    None,
    "--optimizer=adamw: the decoupled weight decay, applied as lr * weight_decay * weight each "
    "step (nanoGPT: 0.1).",
    minimum=0,
    when_unset=0.0,
    resume=MUST_MATCH,
  )
  adam_beta2: Optional[float] = run_setting(
    None,
    "Adam's second-moment decay beta_2 (the paper: 0.98; nanoGPT's small character model: 0.99).",
    above=0,
    below=1,
    when_unset=0.98,
    resume=MUST_MATCH,
  )
  min_learning_rate: Optional[float] = run_setting(
    None,
    "--schedule=cosine: where the cosine decay ends (nanoGPT's min_lr, a tenth of the peak); "
    "below --learning_rate.",
    minimum=0,
    when_unset=0.0,
    resume=MUST_MATCH,
  )
  seed: int = run_setting(
    0,
    "Seed for data generation, initialisation, shuffling, dropout.",
    refers_to=("seed",),
    resume=MUST_MATCH,
  )
  # Devices: follow the machine a run resumes on.
  mixed_precision: str = run_setting(
    "auto",
    "Compute dtype (variables stay float32; float16 uses loss scaling); auto: "
    "bfloat16 on GPUs that have it (compute capability >= 8.0), else float32.",
    choices=PRECISIONS,
    resume=FOLLOWS_MACHINE,
  )
  jit_compile: Optional[bool] = run_setting(
    None,
    "Compile the train step with XLA (batches padded to a few length buckets, one "
    "program each); --nojit_compile: off.",
    unset="on when a GPU is present",
    resume=FOLLOWS_MACHINE,
  )
  deterministic: bool = run_setting(
    False,
    "Enable TF op determinism (bitwise-reproducible runs and resumes).",
    resume=FOLLOWS_MACHINE,
  )
  strategy: str = run_setting(
    "auto",
    "auto: multi_worker if TF_CONFIG lists several workers, else mirrored over all "
    "GPUs (or the split CPU), else one_device.",
    choices=STRATEGIES,
    resume=FOLLOWS_MACHINE,
  )
  cpu_replicas: int = run_setting(
    0,
    "Split the CPU into N logical devices (mirrored training without GPUs).",
    minimum=0,
    resume=FOLLOWS_MACHINE,
  )
  gpu_replicas: int = run_setting(
    0,
    "Split the one GPU into N logical GPUs (mirrored training, and its tests, on a one-GPU "
    "machine).",
    minimum=0,
    resume=FOLLOWS_MACHINE,
  )
  steps_per_loop: Optional[int] = run_setting(
    None,
    "Optimizer steps per host call (Orbit's steps_per_loop, Keras' steps_per_execution): the "
    "host reads the loss and batch shapes once per loop, so the device is not left waiting. "
    "Loops end early at log, checkpoint and evaluation steps; Ctrl-C saves at the end of the "
    "current loop. The weights do not depend on it.",
    above=0,
    unset=f"{GPU_STEPS_PER_LOOP} on a GPU, {CPU_STEPS_PER_LOOP} on a CPU",
    resume=FOLLOWS_MACHINE,
  )
  # Book-keeping, evaluation, export.
  checkpoint_every: Optional[int] = run_setting(
    None, "Steps between checkpoints.", above=0, when_unset=500, resume=MAY_CHANGE
  )
  keep_checkpoints: Optional[int] = run_setting(
    None, "Checkpoints to keep.", above=0, when_unset=3, resume=MAY_CHANGE
  )
  average_checkpoints: Optional[int] = run_setting(
    None,
    "The final evaluation and the export use the mean weights of the last N "
    "checkpoints (the paper averages the last 5 for its base models); needs "
    "--keep_checkpoints >= N.",
    above=0,
    when_unset=1,
    resume=MAY_CHANGE,
  )
  keep_best_by: Optional[str] = run_setting(
    None,
    "Also keep the checkpoint with the best validation value of this metric (at each "
    "--eval_every); the final evaluation, the test number and the export then use it "
    "instead of the last weights.",
    choices=tuple(sorted({m for kind in MODEL_KINDS.values() for m in kind.best_by})),
    unset="off",
    resume=MAY_CHANGE,
  )
  # Fine-tuning (issue 50): another run's weights, parts frozen, stopped early.
  init_from: Optional[str] = run_setting(
    None,
    "Start from another run's final weights (a training run directory, or one that "
    "`python -m train.import_marian` wrote): its model configuration and vocabularies become "
    "this run's, while the optimizer, the learning-rate schedule and the step counter start "
    "anew. The model-size flags are then not used.",
    unset="off",
    resume=MUST_MATCH,
  )
  freeze: Optional[str] = run_setting(
    None,
    "Variables that do not train: embeddings (the token tables, the tied output included) or "
    "encoder (the whole encoder, its embedding included: with a shared vocabulary the "
    "decoder's too).",
    choices=FREEZE_CHOICES,
    when_unset="none",
    resume=MUST_MATCH,
  )
  early_stopping_patience: Optional[int] = run_setting(
    None,
    "Stop training when --keep_best_by's metric has not improved by --early_stopping_min_delta "
    "for this many validation evaluations in a row (every --eval_every steps); the final "
    "evaluation then judges the best weights.",
    minimum=1,
    unset="off",
    resume=MAY_CHANGE,
  )
  early_stopping_min_delta: Optional[float] = run_setting(
    None,
    "--early_stopping_patience: the least change of the metric that counts as improving.",
    minimum=0,
    when_unset=0.0,
    resume=MAY_CHANGE,
  )
  log_every: int = run_setting(100, "Steps between progress lines.", above=0, resume=MAY_CHANGE)
  eval_every: Optional[int] = run_setting(
    None,
    "Steps between validation evaluations; 0 = only at the end.",
    minimum=0,
    when_unset=0,
    resume=MAY_CHANGE,
  )
  eval_examples: int = run_setting(
    1000,
    "Validation examples judged at each evaluation; fewer than the validation data holds is "
    'a partial evaluation, which the log and eval.json mark ("partial": true).',
    above=0,
    resume=MAY_CHANGE,
  )
  attention_images: int = run_setting(
    3,
    "Validation examples whose last-layer attention (seq2seq: cross-attention over the "
    "source; classification: over the input) is drawn to TensorBoard's Images tab at every "
    "evaluation; 0 = none.",
    minimum=0,
    resume=MAY_CHANGE,
  )
  test_examples: Optional[int] = run_setting(
    None,
    "Test examples judged at the end. A recipe's reported number is always the whole "
    "test set; a smaller count is for quick checks.",
    above=0,
    unset="all",
    resume=MAY_CHANGE,
  )
  decode: Optional[Dict[str, Any]] = run_setting(
    None,
    "DecodeOptions values (flags --decode_strategy, --beam_size, ...): how evaluation "
    "decodes, and what the export serves.",
    # Saved before DecodeOptions: evaluation's beam and alpha were their own settings.
    when_missing=lambda saved: DecodeOptions.of_run(saved).to_dict(),
    resume=MAY_CHANGE,
  )
  export_base_path: Optional[str] = run_setting(
    None,
    "When training finishes, export a TF Serving version under this base path (runs "
    "`python -m serving.export`).",
    unset="no export",
    resume=MAY_CHANGE,
  )
  export_decode: str = run_setting(
    "graph",
    "Decoding in the export (serving.export --decode): graph = graph-mode search (loads on "
    "every TF Serving image with no flag); xla = padded search compiled with XLA per source "
    "length bucket (TF Serving then needs --xla_cpu_compilation_enabled=true on CPU, "
    "--xla_gpu_compilation_enabled=true on GPU images >= 2.18).",
    choices=DECODE_MODES,
    # Saved when it could be "auto" (xla where a GPU was present): now the graph export,
    # which every TF Serving image loads with no flag.
    old_values={"auto": "graph"},
    resume=MAY_CHANGE,
  )

  # --- resolution -----------------------------------------------------------------------

  def with_defaults(self, defaults: Dict[str, Any]) -> "RunConfig":
    """Fills every unset (None) field from `defaults` (a recipe's or a task's values); their
    `decode` values fill the decoding options not set yet."""
    filled = dataclasses.asdict(self)
    unknown = sorted(set(defaults) - set(filled))
    if unknown:
      raise ValueError(f"unknown RunConfig fields {unknown}")
    for key, value in defaults.items():
      if key == "decode":
        filled["decode"] = {**(value or {}), **(filled["decode"] or {})}
      elif filled.get(key) is None:
        filled[key] = value
    return RunConfig(**filled)

  def resolved(self, *defaults: Dict[str, Any]) -> "RunConfig":
    """Fills unset fields from each of `defaults` in turn, then from the declared `when_unset`;
    the decoding options become complete (DecodeOptions' own defaults last)."""
    config = self
    for values in (*defaults, UNSET_DEFAULTS):
      config = config.with_defaults(values)
    return dataclasses.replace(config, decode=config.decode_options().to_dict())

  def resolved_for(self, task) -> "RunConfig":
    """Explicit values, then the recipe, then the task's defaults, then `when_unset`. An
    explicit --model preset is not resized by the recipe's or the task's sizes."""
    layers = (recipes.recipe_values(self.recipe, task.kind),) if self.recipe else ()
    layers += (task.defaults,)
    if self.model is not None:
      layers = tuple(
        {k: v for k, v in layer.items() if k not in MODEL_SIZE_FIELDS} for layer in layers
      )
    config = self.resolved(*layers)
    config.check(kind=task.kind)
    return config

  def decode_options(self) -> DecodeOptions:
    """How this run's seq2seq outputs are decoded, in evaluation and in its export."""
    return DecodeOptions(**(self.decode or {}))

  # --- checks ---------------------------------------------------------------------------

  def check(self, kind: Optional[str] = None) -> None:
    """Raises ValueError for the first impossible value or combination. Unset (None) fields
    are skipped, so this runs on the flags before any data is touched, and again once the
    recipe and the task's defaults have filled the rest (with the task's `kind`)."""
    settings.check(self)
    if self.decode:
      settings.check_values(DecodeOptions, self.decode)
    if (
      self.average_checkpoints
      and self.keep_checkpoints
      and self.average_checkpoints > self.keep_checkpoints
    ):
      raise ValueError(
        f"--average_checkpoints ({self.average_checkpoints}) needs "
        f"--keep_checkpoints >= it (got {self.keep_checkpoints})"
      )
    if self.batch_tokens and self.max_length and self.batch_tokens < self.max_length:
      raise ValueError(
        f"--batch_tokens ({self.batch_tokens}) must hold at least one "
        f"--max_length ({self.max_length}) example"
      )
    if self.clip_norm and self.mixed_precision == "mixed_float16":
      raise ValueError(
        "--clip_norm with --mixed_precision=mixed_float16 is not supported "
        "(clipping would see loss-scaled gradients); use mixed_bfloat16"
      )
    if self.early_stopping_patience and not self.keep_best_by:
      raise ValueError(
        "--early_stopping_patience needs --keep_best_by (the validation metric it watches)"
      )
    if self.early_stopping_patience and self.eval_every == 0:
      raise ValueError("--early_stopping_patience needs --eval_every (when validation runs)")
    if self.keep_best_by and self.average_checkpoints and self.average_checkpoints > 1:
      raise ValueError(
        "--keep_best_by and --average_checkpoints > 1 each choose the final "
        "weights: give one of them"
      )
    best_by = MODEL_KINDS[kind].best_by if kind is not None else {}
    if kind is not None and self.keep_best_by and self.keep_best_by not in best_by:
      raise ValueError(
        f"--keep_best_by={self.keep_best_by} is not a {kind} metric; choose one of {list(best_by)}"
      )
    if kind is not None and self.pack_examples and not MODEL_KINDS[kind].packs_pairs:
      raise ValueError(f"--pack_examples packs translation pairs (seq2seq tasks), not {kind}")
    if self.pack_examples and self.attention_window:
      raise ValueError(
        "--pack_examples needs full attention: the windowed attention (--attention_window) "
        "cannot keep packed pairs apart"
      )
    if self.weight_decay and self.optimizer == "adam":
      raise ValueError("--weight_decay needs --optimizer=adamw (Adam has no weight decay)")
    if self.min_learning_rate and self.schedule not in (None, "cosine"):
      raise ValueError(
        f"--min_learning_rate is where --schedule=cosine ends, not --schedule={self.schedule}"
      )
    if (
      self.min_learning_rate
      and self.learning_rate is not None
      and self.min_learning_rate >= self.learning_rate
    ):
      raise ValueError(
        f"--min_learning_rate ({self.min_learning_rate}) must be below --learning_rate "
        f"({self.learning_rate})"
      )
    if self.cpu_replicas > 1 and self.gpu_replicas > 1:
      raise ValueError("--cpu_replicas and --gpu_replicas each split a device: give one of them")
    if kind is not None and self.shared_vocabulary and not MODEL_KINDS[kind].shares_vocabulary:
      raise ValueError(f"--shared_vocabulary is for seq2seq tasks (one side), not {kind}")
    if self.task == "text" and self.text_packing == "documents" and self.attention_window:
      raise ValueError(
        "--text_packing=documents masks attention per document, which a windowed attention "
        "does not take: use --text_packing=blocks with --attention_window"
      )
    if self.task not in TFDS_TASKS:
      for name in ("train_split", "validation_split", "test_split"):
        if getattr(self, name) is not None:
          raise ValueError(f"--{name} applies to TFDS tasks only (--task={self.task})")

  def model_config(
    self, source_vocab_size: int, target_vocab_size: int, num_classes: int
  ) -> TransformerConfig:
    """The model this configuration describes, for the given vocabularies: the preset, then
    every set setting that refers to the model's (`model_setting`), then what the run decides
    in its own terms (vocabularies, precision, one shared table)."""
    return TransformerConfig.preset(
      self.model,
      **settings.referred(self),
      source_vocab_size=source_vocab_size,
      target_vocab_size=target_vocab_size,
      num_classes=num_classes,
      compute_dtype=COMPUTE_DTYPES.get(self.mixed_precision, "float32"),
      share_embeddings=bool(self.shared_vocabulary),
    )

  # --- files ----------------------------------------------------------------------------

  def describe(self, width: int = 100, kind: Optional[str] = None) -> str:
    """The settings that are set, as `name=value` in aligned columns, sorted by name (a long
    value on a line of its own, after them): the effective configuration a run logs at start.
    With the task's `kind`, the settings that mean nothing to this run are left out
    (`APPLIES_TO`) and `decode` shows only what its strategy reads (`DECODE_SHOWN`)."""
    values = {k: v for k, v in dataclasses.asdict(self).items() if v is not None}
    if kind is not None:
      values = {k: v for k, v in values.items() if APPLIES_TO.get(k, _ALWAYS)(self.task, kind)}
      if "decode" in values:
        shown = DECODE_SHOWN[values["decode"]["strategy"]]
        values["decode"] = {
          k: v for k, v in values["decode"].items() if k in shown and v is not None
        }
    items = sorted(f"{k}={v}" for k, v in values.items())
    short = [item for item in items if len(item) <= 30]
    column = max((len(item) for item in short), default=0) + 2
    per_row = max(1, (width - 2) // column)
    rows = [short[i : i + per_row] for i in range(0, len(short), per_row)]
    lines = ["  " + "".join(item.ljust(column) for item in row).rstrip() for row in rows]
    return "\n".join(lines + ["  " + item for item in items if len(item) > 30])

  def save(self, path: str) -> None:
    write_json_atomically(path, dataclasses.asdict(self))

  @classmethod
  def load(cls, path: str) -> "RunConfig":
    """Reads a saved run configuration, including those saved by earlier versions."""
    with open(path) as f:
      return cls.from_saved(json.load(f))

  @classmethod
  def from_saved(cls, values: Dict[str, Any]) -> "RunConfig":
    """A run_config.json of this version or an earlier one: every field says what a save
    without it meant (`settings.from_saved`); settings that became DecodeOptions are dropped."""
    return settings.from_saved(cls, values, retired=("eval_beam_size", "eval_alpha"))


# --- What the start-up configuration shows (`describe`) ------------------------------------
# Settings that mean nothing to some runs, left out of the configuration a run logs at start
# (run_config.json keeps every one): field -> whether it applies to (task name, kind name).
# What a kind reads is its own attribute (`tfattn.kinds.ModelKind`), never its name here.
APPLIES_TO = {
  "tsv_kind": lambda task, kind: task == "tsv",
  "bad_lines": lambda task, kind: task == "tsv",
  "text_packing": lambda task, kind: task == "text",
  "text_documents": lambda task, kind: task == "text",
  "truncate": lambda task, kind: MODEL_KINDS[kind].truncates,
  "shared_vocabulary": lambda task, kind: MODEL_KINDS[kind].shares_vocabulary,
  # A language model's evaluation is its likelihood: its decoding options are the export's
  # generation; a classifier decodes nothing.
  "decode": lambda task, kind: MODEL_KINDS[kind].decodes,
  "export_decode": lambda task, kind: MODEL_KINDS[kind].decodes,
}


def _ALWAYS(task, kind):
  return True


# The DecodeOptions each strategy reads, shown at start (the others wait unused).
_EVERY_SEARCH = (
  "strategy",
  "extra_decode_length",
  "max_decode_length",
  "no_repeat_ngram_size",
  "min_decode_length",
  "never_generate",
  "end_at_limit",
)
DECODE_SHOWN = {
  GREEDY: _EVERY_SEARCH,
  BEAM: (*_EVERY_SEARCH, "beam_size", "alpha", "length_penalty", "beam_stop"),
  SAMPLE: (*_EVERY_SEARCH, "temperature", "top_k", "top_p", "seed"),
}

# What an unset field means when neither the recipe nor the task sets it.
UNSET_DEFAULTS = settings.unset_defaults(RunConfig)
# Fields with no flag of their own (decode's come from DecodeOptions).
FLAGLESS = ("decode",)
