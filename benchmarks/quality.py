"""Quality on real data: each named recipe trained through the real CLI (`python -m train`),
judged on a public test set, printed beside the published numbers it is meant to match.

  python benchmarks/quality.py --imdb=DIR --multi30k=DIR [--recipes=a,b] [--work_dir=DIR]

Data (public; prepare it once, never commit it):
* IMDB (aclImdb v1, 25k train / 25k test): DIR is an `aclImdb` folder (train/{pos,neg}/*.txt,
  test/...), a folder holding train.tsv and test.tsv (`text<TAB>label`), or a TFDS data_dir
  holding a prepared `imdb_reviews`.
* Multi30k German->English, task 1, raw cased text (the `multi30k/dataset` repository's
  data/task1/raw, gunzipped): DIR holds train.{de,en}, val.{de,en}, test_2016_flickr.{de,en}.

IMDB recipes report test accuracy from the training run's evaluation of all 25,000 test
reviews. The translation recipe trains on train, evaluates on val during the run, then the
*exported* SavedModel (beam search as served) translates test_2016_flickr; sacreBLEU's corpus
BLEU (standard 13a tokenization) is reported cased and lowercased, with its signature.
"""

import common

import argparse
import json
import os
import subprocess
import sys
import time

from tfattn.run_dir import RunDir

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Published numbers each recipe is compared with (see WORKSPACE_NOTES for the sources).
ANCHORS = {
    "imdb_attention": [("accuracy", 0.843, "Su Jianlin, one Keras attention layer, no positions"),
                       ("accuracy", 0.8447, "same, sinusoidal positions")],
    "imdb_transformer": [("accuracy", 0.8745, "Keras example: one Transformer block, maxlen 200"),
                         ("accuracy", 0.88, "this project's target")],
    "multi30k_de_en": [("bleu", 38.0, "this project's target (cased)"),
                       ("bleu_lowercase", 41.0, "this project's target (lowercased)"),
                       ("bleu_lowercase", 36.5, "same-size public PyTorch Transformer, greedy")],
}


def _one_line(text):
  return " ".join(text.replace("\t", " ").split("\n"))


def imdb_data_flags(source, work_dir):
  """`python -m train` flags reading IMDB from a folder of any accepted kind."""
  if os.path.isdir(os.path.join(source, "imdb_reviews")):
    return ["--task=imdb_reviews", f"--data_dir={source}"]
  train_tsv, test_tsv = (os.path.join(source, f"{s}.tsv") for s in ("train", "test"))
  if not (os.path.exists(train_tsv) and os.path.exists(test_tsv)):
    train_tsv, test_tsv = aclimdb_to_tsvs(source, work_dir)
  return ["--task=tsv", "--tsv_kind=classification", f"--train_file={train_tsv}",
          f"--eval_file={test_tsv}"]


def aclimdb_to_tsvs(source, work_dir):
  """aclImdb/{train,test}/{neg,pos}/*.txt -> (train.tsv, test.tsv), one review a line."""
  paths = []
  for split in ("train", "test"):
    rows = []
    for label, name in ((0, "neg"), (1, "pos")):
      folder = os.path.join(source, split, name)
      if not os.path.isdir(folder):
        raise SystemExit(f"error: {source} is neither an aclImdb folder ({folder} missing), a "
                         "folder with train.tsv/test.tsv, nor a TFDS data_dir")
      for file_name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, file_name), encoding="utf-8") as f:
          rows.append(f"{_one_line(f.read().strip())}\t{label}\n")
    path = os.path.join(work_dir, f"imdb_{split}.tsv")
    with open(path, "w", encoding="utf-8") as f:
      f.writelines(rows)
    paths.append(path)
  return tuple(paths)


def multi30k_tsvs(source, work_dir):
  """-> {split: tsv path} for train, val and test_2016_flickr (German<TAB>English)."""
  paths = {}
  for split in ("train", "val", "test_2016_flickr"):
    sides = []
    for language in ("de", "en"):
      path = os.path.join(source, f"{split}.{language}")
      if not os.path.exists(path):
        raise SystemExit(f"error: {path} not found (expected Multi30k task 1 raw files)")
      with open(path, encoding="utf-8") as f:
        sides.append([_one_line(line.rstrip("\n")) for line in f])
    if len(sides[0]) != len(sides[1]):
      raise SystemExit(f"error: {split}.de and {split}.en differ in line count")
    paths[split] = os.path.join(work_dir, f"multi30k_{split}.tsv")
    with open(paths[split], "w", encoding="utf-8") as f:
      f.writelines(f"{de}\t{en}\n" for de, en in zip(*sides))
  return paths


def train(run_dir, flags, log_path):
  """Runs `python -m train`; returns (eval.json metrics, wall seconds)."""
  command = [sys.executable, "-m", "train", f"--run_dir={run_dir}", *flags]
  print("$", " ".join(command), flush=True)
  started = time.time()
  with open(log_path, "w") as log:
    result = subprocess.run(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
  seconds = time.time() - started
  if result.returncode:
    raise SystemExit(f"error: training failed, see {log_path}")
  with open(RunDir(run_dir).eval_metrics) as f:
    return json.load(f), seconds


def translate_with_export(run_dir, base_path, test_tsv, batch_size=64):
  """Exports the run (beam 4, as served) and translates the test sources with the SavedModel;
  returns sacreBLEU scores of the outputs against the references."""
  import tensorflow as tf
  import tensorflow_text  # noqa: F401  registers the tokenizer ops

  from serving import export
  from train.evaluation import bleu_scores
  with open(RunDir(run_dir).run_config) as f:
    average_last = json.load(f)["average_checkpoints"]
  path = export.export(run_dir, base_path, average_last=average_last)
  translate = tf.saved_model.load(path).signatures["serving_default"]
  with open(test_tsv, encoding="utf-8") as f:
    sources, references = zip(*(line.rstrip("\n").split("\t") for line in f))
  hypotheses = []
  for start in range(0, len(sources), batch_size):
    out = translate(text=tf.constant(sources[start:start + batch_size]))
    hypotheses += [t.decode() for t in out["translation"].numpy()]
  return path, bleu_scores(hypotheses, list(references)), hypotheses


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--imdb", help="aclImdb folder, folder with train/test.tsv, or TFDS dir")
  parser.add_argument("--multi30k", help="folder with Multi30k task-1 raw files")
  parser.add_argument("--recipes", default="imdb_attention,imdb_transformer,multi30k_de_en")
  parser.add_argument("--work_dir", default=os.path.join(REPO, "runs", "quality"))
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--extra_flag", action="append", default=[],
                      help="passed to every `python -m train` (e.g. --extra_flag=--train_steps=10)")
  args = parser.parse_args()
  os.makedirs(args.work_dir, exist_ok=True)
  print(f"device: {common.device_description()}")
  results = []
  for recipe in filter(None, args.recipes.split(",")):
    if recipe not in ANCHORS:
      raise SystemExit(f"error: unknown recipe {recipe!r}; choose from {sorted(ANCHORS)}")
    run_dir = os.path.join(args.work_dir, f"{recipe}-seed{args.seed}")
    log_path = run_dir + ".log"
    common_flags = [f"--recipe={recipe}", f"--seed={args.seed}", *args.extra_flag]
    if recipe.startswith("imdb"):
      if not args.imdb:
        raise SystemExit(f"error: {recipe} needs --imdb")
      data_flags = imdb_data_flags(args.imdb, args.work_dir)
      metrics, seconds = train(run_dir, data_flags + common_flags + ["--eval_examples=25000"],
                               log_path)
      measured = {"accuracy": metrics["accuracy"], "examples": metrics["examples"]}
    else:
      if not args.multi30k:
        raise SystemExit(f"error: {recipe} needs --multi30k")
      tsvs = multi30k_tsvs(args.multi30k, args.work_dir)
      metrics, seconds = train(run_dir, ["--task=tsv", f"--train_file={tsvs['train']}",
                                         f"--eval_file={tsvs['val']}", "--eval_examples=1014"]
                               + common_flags, log_path)
      started = time.time()
      path, measured, hypotheses = translate_with_export(
          run_dir, os.path.join(args.work_dir, f"{recipe}-models"), tsvs["test_2016_flickr"])
      measured["translate_seconds"] = round(time.time() - started, 1)
      measured["val_bleu_during_training"] = metrics.get("bleu")
      with open(run_dir + ".test_2016_flickr.en", "w", encoding="utf-8") as f:
        f.writelines(h + "\n" for h in hypotheses)
    measured.update(recipe=recipe, seed=args.seed, train_seconds=round(seconds, 1),
                    steps=metrics["step"])
    results.append(measured)
    print(json.dumps(measured, indent=1), flush=True)

  print("\n| recipe | metric | measured | published / target | what |")
  print("|---|---|---|---|---|")
  for measured in results:
    for metric, anchor, what in ANCHORS[measured["recipe"]]:
      value = measured[metric]
      print(f"| {measured['recipe']} | {metric} | {value:.4g} | {anchor} "
            f"({'above' if value >= anchor else 'BELOW'}) | {what} |")
  for measured in results:
    print(f"{measured['recipe']}: {measured['train_seconds']:.0f} s of training, "
          f"{measured['steps']} steps" + (f"; sacreBLEU {measured['bleu_signature']}"
                                           if "bleu_signature" in measured else ""))
  with open(os.path.join(args.work_dir, "results.jsonl"), "a") as f:
    for measured in results:
      f.write(json.dumps(measured) + "\n")


if __name__ == "__main__":
  main()
