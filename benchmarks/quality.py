"""Quality on real data: each named recipe trained through the real CLI (`python -m train`) with
one or more seeds, chosen on validation, judged once on a public test set, and printed beside
the published numbers it is meant to match (the recipe's record in `train/recipes.py`).

  python benchmarks/quality.py --imdb=DIR --multi30k=DIR --tinyshakespeare=FILE [--recipes=a,b]
      [--seeds=3]
  python benchmarks/quality.py --help

Data (public; prepare it once, never commit it):
* IMDB (aclImdb v1, 25k train / 25k test): DIR is an `aclImdb` folder (train/{pos,neg}/*.txt,
  test/...), a folder holding train.tsv and test.tsv (`text<TAB>label`), or a TFDS data_dir
  holding a prepared `imdb_reviews`. IMDB has no validation split: 10% of the training reviews
  are held out as validation, the same for every seed and recipe (from a folder or TSV files: a
  seeded random choice; from TFDS: the dataset's own slice, the last 10%, `train[90%:]`).
* Multi30k German->English, task 1, raw cased text (the `multi30k/dataset` repository's
  data/task1/raw, gunzipped): DIR holds train.{de,en}, val.{de,en}, test_2016_flickr.{de,en};
  val is the validation set, test_2016_flickr the test set.
* Tiny Shakespeare (karpathy/char-rnn's data/tinyshakespeare/input.txt, 1,115,394 characters):
  split as nanoGPT splits it, the first 90% of the characters train and the last 10% validate;
  no test set (nanoGPT's numbers are validation numbers).

Every run reports validation (the in-run evaluation on the whole validation role, what recipes
are chosen on) and test (the whole test set, judged once at the end on the weights that get
exported) from its eval.json; with several seeds, mean and standard deviation.
`--validation_only` leaves the test set out on every route (no test file, no TFDS test split;
for choosing settings); the same command without it then resumes each finished run and judges
its test set once. `--through_export` also exports each translation run and translates the test
set with the SavedModel, as served.
"""

import cli
import common

import dataclasses
import json
import os
import random
import statistics
import subprocess
import sys
import time
from typing import List, Optional

from settings import setting
from tfattn.support.run_dir import RunDir
from train.flag_choices import TFDS_TASKS
from train.recipes import RECIPES

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IMDB_VALIDATION_SHARE = 0.1
IMDB_VALIDATION_SEED = 0  # the held-out reviews do not move with the training seed


def _one_line(text):
  return " ".join(text.replace("\t", " ").split("\n"))


def _write_tsv(path, rows):
  with open(path, "w", encoding="utf-8") as f:
    f.writelines(f"{a}\t{b}\n" for a, b in rows)
  return path


def _read_tsv(path):
  with open(path, encoding="utf-8") as f:
    return [tuple(line.rstrip("\n").split("\t")) for line in f if line.strip()]


def aclimdb_rows(source, split):
  """aclImdb/<split>/{neg,pos}/*.txt -> [(review, label)], one review a row."""
  rows = []
  for label, name in ((0, "neg"), (1, "pos")):
    folder = os.path.join(source, split, name)
    if not os.path.isdir(folder):
      raise cli.UsageError(
        f"{source} is neither an aclImdb folder ({folder} missing), a "
        "folder with train.tsv/test.tsv, nor a TFDS data_dir"
      )
    for file_name in sorted(os.listdir(folder)):
      with open(os.path.join(folder, file_name), encoding="utf-8") as f:
        rows.append((_one_line(f.read().strip()), label))
  return rows


def imdb_data_flags(source, work_dir):
  """`python -m train` flags reading IMDB (train / held-out validation / test) from a folder
  of any accepted kind."""
  if os.path.isdir(os.path.join(source, "imdb_reviews")):  # TFDS: its default split slices
    return [
      "--task=imdb_reviews",
      f"--data_dir={source}",
      f"--eval_examples={tfds_validation_size('imdb_reviews', source)}",
    ]
  if all(os.path.exists(os.path.join(source, f"{s}.tsv")) for s in ("train", "test")):
    train, test = (_read_tsv(os.path.join(source, f"{s}.tsv")) for s in ("train", "test"))
  else:
    train, test = aclimdb_rows(source, "train"), aclimdb_rows(source, "test")
  order = list(range(len(train)))
  random.Random(IMDB_VALIDATION_SEED).shuffle(order)
  held_out = set(order[: round(len(train) * IMDB_VALIDATION_SHARE)])
  paths = {
    role: os.path.join(work_dir, f"imdb_{role}.tsv") for role in ("train", "validation", "test")
  }
  _write_tsv(paths["train"], [row for i, row in enumerate(train) if i not in held_out])
  _write_tsv(paths["validation"], [row for i, row in enumerate(train) if i in held_out])
  _write_tsv(paths["test"], test)
  return [
    "--task=tsv",
    "--tsv_kind=classification",
    f"--train_file={paths['train']}",
    f"--validation_file={paths['validation']}",
    f"--test_file={paths['test']}",
    f"--eval_examples={len(held_out)}",
  ]


def tfds_validation_size(name, data_dir):
  """Examples in the validation slice of a prepared TFDS dataset (validation is judged whole)."""
  import tensorflow_datasets as tfds

  from train.tfds_tasks import DATASETS

  builder = tfds.builder(name, data_dir=data_dir)
  return builder.info.splits[DATASETS[name].validation_split].num_examples


def without_test(flags):
  """`python -m train` data flags with no test role on any route: TSV drops its test file, a
  TFDS task gets an empty test split."""
  flags = [flag for flag in flags if not flag.startswith(("--test_file=", "--test_split="))]
  task = next((flag.split("=", 1)[1] for flag in flags if flag.startswith("--task=")), None)
  return [*flags, "--test_split="] if task in TFDS_TASKS else flags


def multi30k_data_flags(source, work_dir):
  """`python -m train` flags for Multi30k task 1: train, val (validation), test2016 (test)."""
  paths = {}
  for role, split in (("train", "train"), ("validation", "val"), ("test", "test_2016_flickr")):
    sides = []
    for language in ("de", "en"):
      path = os.path.join(source, f"{split}.{language}")
      if not os.path.exists(path):
        raise cli.UsageError(f"{path} not found (expected Multi30k task 1 raw files)")
      with open(path, encoding="utf-8") as f:
        sides.append([_one_line(line.rstrip("\n")) for line in f])
    if len(sides[0]) != len(sides[1]):
      raise cli.UsageError(f"{split}.de and {split}.en differ in line count")
    paths[role] = _write_tsv(os.path.join(work_dir, f"multi30k_{role}.tsv"), zip(*sides))
  return [
    "--task=tsv",
    f"--train_file={paths['train']}",
    f"--validation_file={paths['validation']}",
    f"--test_file={paths['test']}",
    f"--eval_examples={len(_read_tsv(paths['validation']))}",
  ]


def wmt14_data_flags(data_dir, work_dir):
  """A TFDS data_dir holding a prepared wmt14_translate/de-en (read English->German)."""
  del work_dir  # TFDS reads it in place
  return ["--task=wmt14_translate/en-de", f"--data_dir={data_dir}"]


def tinyshakespeare_data_flags(source, work_dir):
  """karpathy/char-rnn's data/tinyshakespeare/input.txt (the file, or its folder), split as
  nanoGPT splits it: the first 90% of the characters train, the last 10% validate (judged
  whole); no test role."""
  path = os.path.join(source, "input.txt") if os.path.isdir(source) else source
  if not os.path.isfile(path):
    raise cli.UsageError(f"{path} not found (expected tiny Shakespeare's input.txt)")
  with open(path, encoding="utf-8") as f:
    text = f.read()
  cut = int(len(text) * 0.9)
  paths = {}
  for role, part in (("train", text[:cut]), ("validation", text[cut:])):
    paths[role] = os.path.join(work_dir, f"tinyshakespeare_{role}.txt")
    with open(paths[role], "w", encoding="utf-8") as f:
      f.write(part)
  return [
    "--task=text",
    f"--train_file={paths['train']}",
    f"--validation_file={paths['validation']}",
    f"--eval_examples={len(text) - cut}",  # more than its blocks: the whole validation text
  ]


DATA_FLAGS = {
  "imdb": imdb_data_flags,
  "multi30k": multi30k_data_flags,
  "wmt14": wmt14_data_flags,
  "tinyshakespeare": tinyshakespeare_data_flags,
}
# Recipes sized for a GPU (wmt14_base: days; shakespeare_char_gpu: minutes on a GPU, a day on
# this CPU) run only when named in --recipes.
ON_REQUEST = ("wmt14_base", "shakespeare_char_gpu")


def train(run_dir, flags, log_path):
  """Runs `python -m train`; returns (eval.json contents, wall seconds)."""
  command = [sys.executable, "-m", "train", f"--run_dir={run_dir}", *flags]
  print("$", " ".join(command), flush=True)
  started = time.time()
  with open(log_path, "w") as log:
    result = subprocess.run(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
  seconds = time.time() - started
  if result.returncode:
    raise cli.RunError(f"training failed, see {log_path}")
  with open(RunDir(run_dir).eval_metrics) as f:
    return json.load(f), seconds


def translate_with_export(run_dir, base_path, test_tsv, batch_size=64):
  """Exports the run (its own decoding options and final weights, as served) and translates
  the test sources with the SavedModel; returns sacreBLEU scores against the references."""
  import tensorflow as tf
  import tensorflow_text  # noqa: F401  registers the tokenizer ops

  from serving import export
  from train.evaluation import bleu_scores

  path = export.export(run_dir, base_path)
  translate = tf.saved_model.load(path).signatures["serving_default"]
  sources, references = zip(*_read_tsv(test_tsv))
  hypotheses = []
  for start in range(0, len(sources), batch_size):
    out = translate(text=tf.constant(sources[start : start + batch_size]))
    hypotheses += [t.decode() for t in out["translation"].numpy()]
  return path, bleu_scores(hypotheses, list(references)), hypotheses


def summary(values):
  """ "mean ± sd (n seeds)" of a list of numbers ("value (1 seed)" for one)."""
  if len(values) == 1:
    return f"{values[0]:.4g} (1 seed)"
  return f"{statistics.mean(values):.4g} ± {statistics.stdev(values):.2g} ({len(values)} seeds)"


def run_recipe(recipe, data_flags, seed, args):
  """One seed of one recipe; returns its measured record."""
  run_dir = os.path.join(args.work_dir, f"{recipe.name}-seed{seed}")
  flags = [*data_flags, f"--recipe={recipe.name}", f"--seed={seed}", *args.extra_flag]
  # A finished run (e.g. chosen with --validation_only) is resumed to be judged, not trained.
  finished = os.path.exists(RunDir(run_dir).eval_metrics)
  metrics, seconds = train(run_dir, flags, run_dir + ".log")
  measured = dict(
    recipe=recipe.name,
    seed=seed,
    **{"judge_seconds" if finished else "train_seconds": round(seconds, 1)},
    steps=metrics["step"],
    weights=metrics["weights"],
    validation=metrics["validation"],
    test=metrics.get("test"),
  )
  if args.through_export and recipe.dataset == "multi30k":
    started = time.time()
    test_tsv = next(f.split("=", 1)[1] for f in data_flags if f.startswith("--test_file="))
    _, served, hypotheses = translate_with_export(
      run_dir, os.path.join(args.work_dir, f"{recipe.name}-seed{seed}-models"), test_tsv
    )
    measured["test_through_export"] = dict(served, seconds=round(time.time() - started, 1))
    with open(run_dir + ".test.hypotheses", "w", encoding="utf-8") as f:
      f.writelines(h + "\n" for h in hypotheses)
  print(json.dumps(measured, indent=1), flush=True)
  return measured


def print_report(results):
  """Per recipe: each anchor's metric on validation and test over the seeds, beside it."""
  print("\n| recipe | metric | validation | test | published / target | what |")
  print("|---|---|---|---|---|---|")
  for name, runs in results.items():
    for anchor in RECIPES[name].anchors:
      validation = [run["validation"][anchor.metric] for run in runs]
      test = [run["test"][anchor.metric] for run in runs if run.get("test")]
      verdict = ""
      if test:
        verdict = " (above)" if statistics.mean(test) >= anchor.value else " (BELOW)"
      print(
        f"| {name} | {anchor.metric} | {summary(validation)} | "
        f"{summary(test) if test else 'no test data'} | {anchor.value}{verdict} | "
        f"{anchor.source} |"
      )
  for name, runs in results.items():
    seconds = [run["train_seconds"] for run in runs if "train_seconds" in run]
    trained = (
      f"{statistics.mean(seconds):.0f} s of training each (mean of {len(seconds)})"
      if seconds
      else "trained before (resumed to be judged)"
    )
    signature = runs[0]["validation"].get("bleu_signature")
    print(
      f"{name}: seeds {[run['seed'] for run in runs]}, {trained}, {runs[0]['steps']} steps, "
      "final weights: "
      f"{runs[0]['weights']['chosen_by']}" + (f"; sacreBLEU {signature}" if signature else "")
    )


@dataclasses.dataclass(frozen=True)
class QualityFlags:
  """The flags of `benchmarks/quality.py`."""

  imdb: Optional[str] = setting(None, "aclImdb folder, folder with train/test.tsv, or TFDS dir.")
  multi30k: Optional[str] = setting(None, "Folder with the Multi30k task-1 raw files.")
  wmt14: Optional[str] = setting(None, "TFDS data_dir with wmt14_translate/de-en prepared.")
  tinyshakespeare: Optional[str] = setting(
    None, "karpathy/char-rnn's data/tinyshakespeare/input.txt (or its folder)."
  )
  recipes: List[str] = setting(
    tuple([name for name in RECIPES if name not in ON_REQUEST]),
    "Recipes to train and judge (the GPU-sized wmt14_base and shakespeare_char_gpu only when "
    "named).",
  )
  work_dir: str = setting(
    os.path.join(REPO, "runs", "quality"), "Where the runs, data files and results.jsonl go."
  )
  seeds: int = setting(1, "Seeds to run: --seed, --seed + 1, ...", minimum=1)
  seed: int = setting(0, "The first seed.")
  validation_only: bool = setting(
    False,
    "Train and judge validation only (the whole validation role), never the test set, "
    "whatever the data route (TSV, aclImdb folder or TFDS): for choosing a setting. The "
    "same command without it then resumes each finished run and judges its test set once.",
  )
  through_export: bool = setting(
    False, "Translation recipes: also translate the test set with the export."
  )
  extra_flag: List[str] = setting(
    (), "Passed to every `python -m train` (e.g. --extra_flag=--train_steps=10).", repeat=True
  )


def _define_flags():

  cli.define_flags(QualityFlags)


def main(argv):
  cli.start_tensorflow_quietly()  # the flags are good: now TensorFlow, quietly
  del argv  # cli.run refuses positional arguments
  from absl import flags

  args = flags.FLAGS
  for name in args.recipes:
    if name not in RECIPES:
      raise cli.UsageError(f"unknown recipe {name!r}; choose from {sorted(RECIPES)}")
    if not getattr(args, RECIPES[name].dataset):
      raise cli.UsageError(f"{name} needs --{RECIPES[name].dataset}=DIR")
  os.makedirs(args.work_dir, exist_ok=True)
  print(f"device: {common.device_description()}")
  results, data_flags = {}, {}
  for name in args.recipes:
    recipe = RECIPES[name]
    if recipe.dataset not in data_flags:
      flags_ = DATA_FLAGS[recipe.dataset](getattr(args, recipe.dataset), args.work_dir)
      if args.validation_only:
        flags_ = without_test(flags_)
      data_flags[recipe.dataset] = flags_
    results[name] = [
      run_recipe(recipe, data_flags[recipe.dataset], seed, args)
      for seed in range(args.seed, args.seed + args.seeds)
    ]
    with open(os.path.join(args.work_dir, "results.jsonl"), "a") as f:
      f.writelines(json.dumps(run) + "\n" for run in results[name])
  print_report(results)


if __name__ == "__main__":
  _define_flags()
  cli.run(main)
