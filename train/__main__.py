"""`python -m train`: train a tfattn model. With no flags it trains the built-in `numbers` task
(digits -> English words) on this machine in a few minutes. `--help` lists every flag.

Every flag is a setting of one of `RunConfig`'s sections (`train/run_config.py`,
`train/sections/`) or a `DecodeOptions` field (`tfattn/decode_options.py`), declared there once
with its default, help and allowed values; a flag keeps the setting's flat name.
"""

import cli

import os
import shutil
import subprocess
import sys

from absl import flags, logging

# These import no TensorFlow: the flags are defined, parsed and checked without it.
import settings
from tfattn.decode_options import DecodeOptions
from train import data_files, resume
from train.run_config import FLAGLESS, RunConfig

FLAGS = flags.FLAGS
UNSET = "the recipe's, then the task's value"
OLD_FLAG_NAMES = {"eval_file": "validation_file"}  # before the three data roles


def _define_flags():
  # The names these settings had before DecodeOptions and the three data roles still work.
  for section in settings.classes(RunConfig):  # each section's flags, by their flat names
    names = {settings.flag_name(field) for field, _ in settings.declared(section)}
    aliases = {old: new for old, new in OLD_FLAG_NAMES.items() if new in names}
    cli.define_flags(section, unset=UNSET, skip=FLAGLESS, aliases=aliases)
  cli.define_flags(
    DecodeOptions,
    optional=True,
    unset=UNSET,
    aliases={"eval_beam_size": "beam_size", "eval_alpha": "alpha"},
  )


def config_from_flags() -> RunConfig:
  """The flags as a RunConfig; resuming a run directory, the flags not given on this command
  line take the saved run's values (train/resume.py)."""
  decode = cli.flag_values(DecodeOptions, only_present=True)
  requested = RunConfig.of(**_flat_flags(), decode=decode or None)
  saved = resume.saved_config(requested.run_dir)
  if saved is None:
    return requested
  explicit = list(_flat_flags(only_present=True))
  logging.info("resuming %s with its saved configuration", requested.run_dir)
  return resume.merge_for_resume(saved, requested, explicit)


def _flat_flags(only_present: bool = False) -> dict:
  """{flat name: value} of every section's flags (with `only_present`, those given)."""
  return {
    settings.flag_name(field): FLAGS[settings.flag_name(field)].value
    for field, _ in settings.leaves(RunConfig)
    if field.name not in FLAGLESS and (not only_present or FLAGS[settings.flag_name(field)].present)
  }


def _check_directory(flag, path):
  """A directory flag naming an existing file is the user's mistake, told before any work."""
  if path and os.path.exists(path) and not os.path.isdir(path):
    raise cli.UsageError(f"--{flag}={path} is a file; pass a directory")


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


def _export(config):
  # A subprocess keeps the layering: training never imports the serving package. The export
  # reads the run's decoding options and final weights from the run directory.
  command = [
    sys.executable,
    "-m",
    "serving.export",
    f"--run_dir={config.run_dir}",
    f"--base_path={config.export.export_base_path}",
  ]
  if config.export.export_decode:  # a kind that decodes nothing has no decode mode
    command.append(f"--decode={config.export.export_decode}")
  if subprocess.run(command).returncode:
    raise cli.RunError(
      f"the export failed (see above); the trained run in {config.run_dir} is "
      f"intact: fix the cause and run {' '.join(command[1:])}"
    )


def _train(trainer):
  """trainer.run(); a bad line met in a streamed file (--bad_lines=fail) ends in one line."""
  import tensorflow as tf

  from train import streams

  try:
    return trainer.run()
  except tf.errors.InvalidArgumentError as error:
    message = streams.bad_line_message(error)
    if message is None:
      raise
    raise cli.RunError(
      f"{message}; the checkpoints saved so far are kept: fix the line, or pass "
      "--bad_lines=skip, and run again to resume"
    ) from None


def main(argv):
  del argv  # cli.run refuses positional arguments
  # The flags, the saved run and the directories are checked before TensorFlow loads (the
  # Trainer brings it in): a mistake there is told at once.
  _check_directory("run_dir", FLAGS.run_dir)
  try:
    config = config_from_flags()
    config.check()  # the values as given (the Trainer checks them again once resolved)
    data_files.check_local_files(config.data)  # before TensorFlow: the task reads them after
  except ValueError as error:
    raise cli.UsageError(str(error)) from None
  _check_directory("export_base_path", config.export.export_base_path)
  cli.start_tensorflow_quietly()  # the first import of TensorFlow, its start-up lines filtered
  trainer = _make_trainer(config)
  result = _train(trainer)
  if result is None:
    return
  from train.trainer import final_metrics

  print("\n".join(final_metrics(result)))
  if config.export.export_base_path and trainer.is_chief:
    _export(trainer.config)


if __name__ == "__main__":
  _define_flags()
  cli.run(main)
