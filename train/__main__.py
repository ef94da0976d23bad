"""`python -m train`: train a tfattn model. With no flags it trains the built-in `numbers` task
(digits -> English words) on this machine in a few minutes. `--help` lists every flag."""

import cli

import dataclasses
import os
import shutil
import subprocess
import sys

cli.start_tensorflow_quietly()  # before the imports below bring TensorFlow in

from absl import flags, logging  # noqa: E402

from train import resume  # noqa: E402
from train.distribute import STRATEGIES  # noqa: E402
from train.recipes import RECIPES  # noqa: E402
from train.run_config import FALLBACKS, RunConfig  # noqa: E402
from train.tasks import BUILTIN_TASKS, CLASSIFICATION, SEQ2SEQ, TFDS_TASKS  # noqa: E402

_DEFAULTS = RunConfig()
_TASK_DEFAULT = "(default: the task's recommended value)"

flags.DEFINE_string("run_dir", _DEFAULTS.run_dir,
                    "Run directory: config, vocabularies, checkpoints, logs. Reuse it to resume.")
flags.DEFINE_enum("task", _DEFAULTS.task, list(BUILTIN_TASKS) + list(TFDS_TASKS) + ["tsv"],
                  "What to learn. Built-in tasks are generated offline from --seed; TFDS tasks "
                  "download through tensorflow-datasets; tsv reads --train_file/--eval_file.")
flags.DEFINE_string("data_dir", None, "tensorflow-datasets data directory.")
flags.DEFINE_string("train_file", None, "TSV training file: source<TAB>target or text<TAB>label.")
flags.DEFINE_string("eval_file", None, "TSV held-out file (default: the first 1000 train lines).")
flags.DEFINE_enum("tsv_kind", _DEFAULTS.tsv_kind, [SEQ2SEQ, CLASSIFICATION],
                  "What the TSV's second column is.")
flags.DEFINE_enum("recipe", None, sorted(RECIPES),
                  "A named recipe measured on real data (train/recipes.py): fills every flag "
                  "not given explicitly. imdb_attention / imdb_transformer: --task=imdb_reviews "
                  "or a classification TSV; multi30k_de_en: a de->en TSV.")
flags.DEFINE_enum("model", None, ["tiny", "small", "base", "big"],
                  f"Model size preset {_TASK_DEFAULT}.")
flags.DEFINE_integer("d_model", None, f"Model width {_TASK_DEFAULT}.")
flags.DEFINE_integer("num_heads", None, f"Attention heads {_TASK_DEFAULT}.")
flags.DEFINE_integer("dff", None, f"Feed-forward inner width {_TASK_DEFAULT}.")
flags.DEFINE_integer("num_layers", None, f"Encoder and decoder layers each {_TASK_DEFAULT}.")
flags.DEFINE_enum("norm_position", _DEFAULTS.norm_position, ["post", "pre"],
                  "Layer norm after (paper) or before each sublayer.")
flags.DEFINE_enum("classifier_body", None, ["transformer", "attention"],
                  "Classification only: the encoder stack, or one self-attention layer over "
                  f"embeddings (Su Jianlin's experiment) {_TASK_DEFAULT}.")
flags.DEFINE_float("dropout", None, f"Dropout rate {_TASK_DEFAULT}.")
flags.DEFINE_float("feed_forward_dropout", None,
                   "Dropout on the feed-forward hidden layer, after the ReLU (tensor2tensor's "
                   "relu_dropout; the paper drops only sublayer outputs and embeddings) "
                   f"(default: the recipe's, else {FALLBACKS['feed_forward_dropout']}).")
flags.DEFINE_enum("tokenizer", None, ["sentencepiece", "wordpiece"],
                  "sentencepiece: lossless (case, spacing, punctuation kept); wordpiece: "
                  f"case-folded words (default: the task's, else {FALLBACKS['tokenizer']}).")
flags.DEFINE_bool("lower_case", None, "Case-fold text before SentencePiece (default: the "
                  "task's: on for classification, off for seq2seq).")
flags.DEFINE_integer("vocab_size", None, f"Vocabulary size {_TASK_DEFAULT}.")
flags.DEFINE_integer("vocab_examples", None,
                     f"Training examples the vocabulary is learned from {_TASK_DEFAULT}.")
flags.DEFINE_integer("max_length", None, f"Longest sequence in tokens {_TASK_DEFAULT}.")
flags.DEFINE_enum("truncate", None, ["right", "left"],
                  "Classification: which end of a long text is cut off; left keeps the last "
                  "max_length tokens (reviews end with their verdict) (default: the task's).")
flags.DEFINE_integer("batch_size", None, f"Global batch size (all replicas) {_TASK_DEFAULT}.")
flags.DEFINE_integer("batch_tokens", None,
                     "Token-based batching: each batch holds as many examples of its length "
                     "bucket as fit this many padded tokens (the paper: ~25k); replaces "
                     "--batch_size for training.")
flags.DEFINE_integer("grad_accum_steps", _DEFAULTS.grad_accum_steps,
                     "Micro-batches per optimizer step (gradient accumulation): a large "
                     "effective batch on one GPU.")
flags.DEFINE_integer("train_steps", None, f"Total optimizer steps {_TASK_DEFAULT}.")
flags.DEFINE_enum("schedule", None, ["noam", "rsqrt", "cosine", "constant"],
                  "Learning-rate schedule: noam (the paper's; peak depends on d_model), or a "
                  "linear warm-up to --learning_rate then rsqrt decay, cosine decay to 0, or "
                  f"constant (default: the task's, else {FALLBACKS['schedule']}).")
flags.DEFINE_float("learning_rate", None, "noam: scale on the schedule; rsqrt/cosine/constant: "
                   f"the peak learning rate {_TASK_DEFAULT}.")
flags.DEFINE_integer("warmup_steps", None, f"Warm-up steps {_TASK_DEFAULT}.")
flags.DEFINE_float("label_smoothing", None, "Label smoothing epsilon (default: the task's, "
                   f"else {FALLBACKS['label_smoothing']}).")
flags.DEFINE_float("clip_norm", _DEFAULTS.clip_norm, "Global gradient-norm clip; 0 disables.")
flags.DEFINE_enum("mixed_precision", _DEFAULTS.mixed_precision,
                  ["auto", "float32", "mixed_float16", "mixed_bfloat16"],
                  "Compute dtype (variables stay float32; float16 uses loss scaling); auto: "
                  "bfloat16 on GPUs that have it (compute capability >= 8.0), else float32.")
flags.DEFINE_bool("jit_compile", None,
                  "Compile the train step with XLA (batches padded to a few length buckets, "
                  "one program each). Default: on when a GPU is present; --nojit_compile: off.")
flags.DEFINE_integer("seed", _DEFAULTS.seed, "Seed for data generation, init, shuffling, dropout.")
flags.DEFINE_bool("deterministic", _DEFAULTS.deterministic,
                  "Enable TF op determinism (bitwise-reproducible runs and resumes).")
flags.DEFINE_enum("strategy", _DEFAULTS.strategy, list(STRATEGIES),
                  "auto: multi_worker if TF_CONFIG lists several workers, else mirrored over "
                  "all GPUs (or the split CPU), else one_device.")
flags.DEFINE_integer("cpu_replicas", _DEFAULTS.cpu_replicas,
                     "Split the CPU into N logical devices (mirrored training without GPUs).")
flags.DEFINE_integer("checkpoint_every", None, "Steps between checkpoints (default: the "
                     f"recipe's, else {FALLBACKS['checkpoint_every']}).")
flags.DEFINE_integer("keep_checkpoints", None, "Checkpoints to keep (default: the recipe's, "
                     f"else {FALLBACKS['keep_checkpoints']}).")
flags.DEFINE_integer("average_checkpoints", None,
                     "The export averages the weights of the last N checkpoints (the paper "
                     "averages the last 5 for its base models); needs --keep_checkpoints >= N "
                     f"(default: the recipe's, else {FALLBACKS['average_checkpoints']}).")
flags.DEFINE_integer("log_every", _DEFAULTS.log_every, "Steps between progress lines.")
flags.DEFINE_integer("eval_every", _DEFAULTS.eval_every, "Steps between evaluations; 0 = at end.")
flags.DEFINE_integer("eval_examples", _DEFAULTS.eval_examples, "Held-out examples to evaluate.")
flags.DEFINE_integer("eval_beam_size", None,
                     "Seq2seq evaluation: 1 = greedy, > 1 = beam search (slower, better BLEU) "
                     f"(default: the recipe's, else {FALLBACKS['eval_beam_size']}).")
flags.DEFINE_float("eval_alpha", _DEFAULTS.eval_alpha, "Beam search length penalty in evaluation.")

flags.DEFINE_string("export_base_path", None,
                    "When training finishes, export a TF Serving version under this base path "
                    "(runs `python -m serving.export`).")
flags.DEFINE_enum("export_decode", "auto", ["auto", "graph", "xla"],
                  "Decoding in the export (serving.export --decode): xla = padded search "
                  "compiled with XLA per source length bucket; graph = graph-mode search; auto = "
                  "xla where a GPU is present, else graph.")

FLAGS = flags.FLAGS


def config_from_flags() -> RunConfig:
  """The flags as a RunConfig; resuming a run directory, the flags not given on this command
  line take the saved run's values (train/resume.py)."""
  requested = RunConfig(**{field.name: getattr(FLAGS, field.name)
                           for field in dataclasses.fields(RunConfig)})
  saved = resume.saved_config(requested.run_dir)
  if saved is None:
    return requested
  explicit = [field.name for field in dataclasses.fields(RunConfig) if FLAGS[field.name].present]
  logging.info("resuming %s with its saved configuration", requested.run_dir)
  return resume.merge_for_resume(saved, requested, explicit)


def _check_export_path(path):
  if path and os.path.exists(path) and not os.path.isdir(path):
    raise cli.UsageError(f"--export_base_path={path} is a file; pass a directory")


def _make_trainer(config):
  """The Trainer; a run directory this call created is removed again if setting up fails."""
  from train.trainer import Trainer, prepare
  created = not os.path.exists(config.run_dir)
  try:
    return Trainer(*prepare(config))
  except BaseException as error:
    if created:
      shutil.rmtree(config.run_dir, ignore_errors=True)
    if isinstance(error, ValueError):  # bad settings or data, told in one line
      raise cli.UsageError(str(error)) from error
    raise


def _export(run_dir, base_path, average_last):
  # A subprocess keeps the layering: training never imports the serving package.
  command = [sys.executable, "-m", "serving.export", f"--run_dir={run_dir}",
             f"--base_path={base_path}", f"--average_last={average_last}",
             f"--decode={FLAGS.export_decode}"]
  if subprocess.run(command).returncode:
    raise cli.RunError(f"the export failed (see above); the trained run in {run_dir} is intact: "
                       f"fix the cause and run {' '.join(command[1:])}")


def main(argv):
  del argv  # cli.run refuses positional arguments
  try:
    config = config_from_flags()
  except ValueError as error:
    raise cli.UsageError(str(error)) from None
  _check_export_path(config.export_base_path)
  trainer = _make_trainer(config)
  metrics = trainer.run()
  if metrics is None:
    return
  print({k: round(v, 4) if isinstance(v, float) else v for k, v in metrics.items()})
  if config.export_base_path and trainer.is_chief:
    _export(config.run_dir, config.export_base_path,
            len(metrics.get("averaged_checkpoints", [1])))


if __name__ == "__main__":
  cli.run(main)
