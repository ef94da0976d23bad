"""`python -m train.evaluate`: judge a trained run's checkpoint on a file, without training.

    python -m train.evaluate --run_dir=runs/lm --file=valid.txt              # latest weights
    python -m train.evaluate --run_dir=runs/lm --file=test.txt --weights=best
    python -m train.evaluate --run_dir=runs/lm                               # its validation data

The file is read as the run reads its own (`--task=text`: one text a line; `--task=tsv`: its
TSV lines or TFRecords) and judged whole unless `--max_examples` says otherwise, with the
run's kind's metrics (a language model: perplexity, nats per character, bits per byte). The
result is printed and written atomically as JSON (`--output`, default
`<run_dir>/evaluations/<file name>.json`).

Flags, the run directory, the file and the checkpoint are checked before TensorFlow loads: a
mistake is one line and exit status 2.
"""

import cli

import dataclasses
import json
import os
from typing import Optional

from settings import setting
from tfattn.support.run_dir import RunDir
from train.files import write_json_atomically
from train.flag_choices import TEXT, TSV

LATEST, BEST = "latest", "best"


@dataclasses.dataclass(frozen=True)
class EvaluateFlags:
  """The flags of `python -m train.evaluate`."""

  run_dir: Optional[str] = setting(None, "Training run directory (required).")
  file: Optional[str] = setting(
    None,
    "The file to judge, in the run's format (--task=text: plain text, one text a line; "
    "--task=tsv: TSV lines or TFRecords); default: the run's own validation data.",
  )
  weights: str = setting(
    LATEST,
    "Which weights: the latest checkpoint, or the best on validation (a run trained with "
    "--keep_best_by).",
    choices=(LATEST, BEST),
  )
  max_examples: Optional[int] = setting(
    None, "Judge only the first N examples (the result then says partial).", unset="all", above=0
  )
  output: Optional[str] = setting(
    None,
    "Where the JSON result is written (atomically).",
    unset="<run_dir>/evaluations/<file name>.json",
  )


def _checked(f: EvaluateFlags):
  """(run layout, saved run configuration as JSON, the checkpoint directory, the output path);
  a cli.UsageError for the first mistake. Reads no TensorFlow."""
  if not f.run_dir:
    raise cli.UsageError("--run_dir is required: the training run whose weights are judged")
  layout = RunDir(f.run_dir)
  for required in (layout.run_config, layout.task, layout.model_config):
    if not os.path.isfile(required):
      raise cli.UsageError(
        f"--run_dir={f.run_dir} is not a training run directory "
        f"(missing {os.path.basename(required)})"
      )
  with open(layout.run_config) as config_file:
    saved = json.load(config_file)
  if f.file is not None:
    if not os.path.isfile(f.file):
      raise cli.UsageError(f"--file={f.file} does not exist (or is not a file)")
    if saved.get("task") not in (TEXT, TSV):
      raise cli.UsageError(
        f"--file reads the files of --task=text and --task=tsv runs; this run's task is "
        f"{saved.get('task')}: leave --file out to judge its validation data"
      )
  directory = layout.best_checkpoints if f.weights == BEST else layout.checkpoints
  if not os.path.isfile(os.path.join(directory, "checkpoint")):
    raise cli.UsageError(
      f"{directory} holds no checkpoint"
      + (" (the run was not trained with --keep_best_by)" if f.weights == BEST else "")
    )
  name = os.path.basename(f.file) if f.file else "validation"
  output = f.output or os.path.join(layout.path, "evaluations", name + ".json")
  if os.path.isdir(output):
    raise cli.UsageError(f"--output={output} is a directory; pass a file path")
  return layout, saved, directory, output


def evaluate(layout: RunDir, saved: dict, checkpoint_dir: str, file, weights, max_examples):
  """The run's model with the chosen weights, judged on `file` (None: the run's validation
  data). Returns the result to write: {"run_dir", "data", "weights", "checkpoint", "step",
  "metrics"}. A ValueError for data the run cannot read."""
  import tensorflow as tf

  from tfattn import text
  from tfattn.config import TransformerConfig
  from train import kinds
  from train.batching import Batching
  from train.run_config import RunConfig
  from train.tasks import get_task

  config = RunConfig.from_saved(saved)
  if file is not None:  # the file in every role a task needs: only validation is read here
    config = config.replace(train_file=file, validation_file=file, test_file=None)
  task = get_task(config.data, config.seed)
  kind = kinds.of(task)
  tokenizers = {
    side: text.load_tokenizer(text.tokenizer_path(layout.vocab, side))
    for side in kind.vocabulary_sides
  }
  with open(layout.model_config) as f:
    model = kind.build_model(TransformerConfig.from_json(f.read()))
  prefix = tf.train.latest_checkpoint(checkpoint_dir)
  tf.train.Checkpoint(model=model).read(prefix).expect_partial().assert_existing_objects_matched()
  # The batches of the run's own evaluation (Trainer._dataset with training=False).
  batching = Batching(
    batch_size=config.data.batch_size,
    max_length=config.model.max_length,
    start_id=model.config.start_id,
    truncate=config.data.truncate or "right",
  )
  # The task's packing (`train.tasks.get_task`), as in training.
  dataset = kind.dataset(task.validation(), tokenizers, batching, task.packing)
  decoding = config.decode_options() if kind.decodes else None
  metrics = kind.evaluate(model, dataset, tokenizers, decoding, max_examples)
  return {
    "run_dir": layout.path,
    "data": os.path.abspath(file)
    if file
    else f"the run's validation data (task {config.data.task})",
    "weights": weights,
    "checkpoint": os.path.relpath(prefix, layout.checkpoints),
    "step": int(prefix.rsplit("-", 1)[1]),
    "metrics": metrics,
  }


def main(argv):
  del argv  # cli.run refuses positional arguments
  f = EvaluateFlags(**cli.flag_values(EvaluateFlags))
  layout, saved, checkpoint_dir, output = _checked(f)
  cli.start_tensorflow_quietly()  # all checked that can be without it
  import tensorflow as tf

  from train import streams
  from train.evaluation import coverage_note, shown_metric

  try:
    result = evaluate(layout, saved, checkpoint_dir, f.file, f.weights, f.max_examples)
  except ValueError as error:  # the file: missing text, a bad line, ...
    raise cli.UsageError(str(error)) from None
  except tf.errors.InvalidArgumentError as error:  # a bad line met while streaming
    message = streams.bad_line_message(error)
    if message is None:
      raise
    raise cli.UsageError(message) from None
  write_json_atomically(output, result)
  metrics = result["metrics"]
  print(
    f"{result['checkpoint']} (step {result['step']}) on {result['data']}{coverage_note(metrics)}:"
  )
  print(
    "  ".join(
      f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}"
      for k, v in sorted(metrics.items())
      if shown_metric(k, v)
    )
  )
  print(f"wrote {output}")


if __name__ == "__main__":
  cli.define_flags(EvaluateFlags)
  cli.run(main)
