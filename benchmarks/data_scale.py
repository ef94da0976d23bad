"""Does training on our own files scale with the corpus? Writes a seeded synthetic
German/English-shaped TSV of N lines (about 250 bytes a line, as WMT) into a temporary folder,
trains a few steps on it with `python -m train --task=tsv` (a fresh process per size), and prints
side by side: the process's peak RSS, the seconds the vocabularies took (and of them the
pass that samples the corpus), the seconds from the vocabularies to the first step, and steps/s.

  python benchmarks/data_scale.py [--lines=300000,3000000] [--train_steps=30]

Targets (issue 32): peak RSS <= 1.5 GB and flat in N (the largest within 15% of the smallest),
vocabularies <= 60 s, first step <= 60 s after them. The corpus is deleted afterwards
(--keep_corpus keeps it); nothing is written into the repository.
"""

import cli
import common

import dataclasses
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from typing import List, Optional

import numpy as np

from settings import setting

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# A small model: the benchmark measures the data path, not the model.
MODEL_FLAGS = [
  "--model=tiny",
  "--d_model=64",
  "--dff=128",
  "--num_heads=4",
  "--num_layers=1",
  "--batch_size=64",
  "--max_length=64",
  "--log_every=1",
  "--eval_examples=8",
  "--decode_strategy=greedy",
  "--attention_images=0",
  "--checkpoint_every=100000",
]
_TIME = re.compile(r"^[IWE]\d{4} (\d\d):(\d\d):(\d\d\.\d+)")


def _pseudo_words(rng, count, letters):
  lengths = rng.integers(2, 11, size=count)
  # One draw for every letter (the same letters as one rng.choice a word, 40x faster).
  text = "".join(np.array(letters)[rng.integers(0, len(letters), size=int(lengths.sum()))])
  ends = np.cumsum(lengths).tolist()
  return [text[end - n : end] for end, n in zip(ends, lengths.tolist())]


def write_corpus(path, lines, seed, chunk=100_000):
  """`lines` lines `source<TAB>target` of seeded pseudo-words (Zipf-distributed, 8-30 words a
  side, capitalised first word, a full stop), written a chunk at a time. Returns bytes."""
  rng = np.random.default_rng(seed)
  vocab = {
    side: np.array(_pseudo_words(rng, 30_000, list(letters)))
    for side, letters in (("de", "abcdefghiklmnoprstuäöüß"), ("en", "abcdefghiklmnoprstuwy"))
  }
  with open(path, "w", encoding="utf-8") as f:
    for start in range(0, lines, chunk):
      count = min(chunk, lines - start)
      sides = []
      for side in ("de", "en"):
        lengths = rng.integers(8, 31, size=count)
        ranks = np.minimum(rng.zipf(1.2, size=lengths.sum()), 30_000) - 1
        words = vocab[side][ranks]
        cuts = np.cumsum(lengths)[:-1]
        sides.append([" ".join(row).capitalize() + "." for row in np.split(words, cuts)])
      f.write("".join(f"{a}\t{b}\n" for a, b in zip(*sides)))
  return os.path.getsize(path)


def _seconds(line):
  found = _TIME.match(line)
  if not found:
    return None
  hours, minutes, seconds = found.groups()
  return int(hours) * 3600 + int(minutes) * 60 + float(seconds)


def _clock(timestamp):
  """Seconds since local midnight, as the log lines' times."""
  local = time.localtime(timestamp)
  return local.tm_hour * 3600 + local.tm_min * 60 + local.tm_sec + timestamp % 1


def measure(corpus, validation, run_dir, train_steps, extra):
  """Trains on `corpus` in a fresh process; returns its figures."""
  command = [
    sys.executable,
    "-m",
    "train",
    f"--run_dir={run_dir}",
    "--task=tsv",
    f"--train_file={corpus}",
    f"--validation_file={validation}",
    f"--train_steps={train_steps}",
    *MODEL_FLAGS,
    *extra,
  ]
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
  started = time.time()
  process = subprocess.Popen(
    command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
  )
  output = process.stdout.read()
  _, status, usage = os.wait4(process.pid, 0)
  process.returncode = os.waitstatus_to_exitcode(status)
  if process.returncode:
    raise cli.RunError(f"training failed on {corpus}:\n{output[-3000:]}")
  lines = output.splitlines()
  vocab_done = [_seconds(line) for line in lines if "vocabulary learned in" in line]
  vocab_start = [_seconds(line) for line in lines if "distribute.py" in line]  # just before
  first_step = [_seconds(line) for line in lines if re.search(r"\] step 1/", line)]
  rates = [
    float(m.group(1))
    for m in (re.search(r"\] step (?:\d+)/\d+ .* ([\d.]+) steps/s", line) for line in lines)
    if m
  ]
  steady = rates[len(rates) // 2 :] or rates  # after the graph is built
  sampled = [re.search(r"vocabulary sample: \d+ of \d+ .*\(([\d.]+) s\)", line) for line in lines]
  return {
    "peak RSS (MB)": usage.ru_maxrss / 1024,
    "vocabulary (s)": vocab_done[-1] - vocab_start[0],
    "  of which the sampling pass (s)": next(float(m.group(1)) for m in sampled if m),
    "first step after vocabulary (s)": first_step[0] - vocab_done[-1],
    "process start to first step (s)": first_step[0] - _clock(started),
    "steps/s": float(np.median(steady)),
    "wall (s)": time.time() - started,
  }


@dataclasses.dataclass(frozen=True)
class DataScaleFlags:
  """The flags of `benchmarks/data_scale.py`."""

  lines: List[str] = setting(("300000", "3000000"), "Corpus sizes in lines, compared.")
  train_steps: int = setting(30, "Steps trained at each size.", minimum=2)
  seed: int = setting(0, "Corpus seed.")
  work_dir: Optional[str] = setting(None, "Where the corpora go (default: a new temp folder).")
  keep_corpus: bool = setting(False, "Keep the corpora and runs.")
  extra_flag: List[str] = setting((), "Passed to `python -m train`.", repeat=True)


def _define_flags():

  cli.define_flags(DataScaleFlags)


def main(argv):
  cli.start_tensorflow_quietly()  # the flags are good: now TensorFlow, quietly
  del argv
  from absl import flags

  args = flags.FLAGS
  try:
    sizes = [int(n) for n in args.lines]
  except ValueError:
    raise cli.UsageError(f"--lines must be integers, got {args.lines}") from None
  if any(n < 100 for n in sizes):
    raise cli.UsageError("--lines: each size must be at least 100")
  work = args.work_dir or tempfile.mkdtemp(prefix="data_scale-")
  os.makedirs(work, exist_ok=True)
  results = {}
  try:
    validation = os.path.join(work, "validation.tsv")
    write_corpus(validation, 200, args.seed + 1)
    for n in sizes:
      corpus = os.path.join(work, f"train-{n}.tsv")
      started = time.time()
      size = write_corpus(corpus, n, args.seed)
      print(f"{n} lines: {size / 1e6:.0f} MB written in {time.time() - started:.0f} s", flush=True)
      results[n] = measure(
        corpus, validation, os.path.join(work, f"run-{n}"), args.train_steps, args.extra_flag
      )
      results[n]["corpus (MB)"] = size / 1e6
      if not args.keep_corpus:
        os.remove(corpus)
  finally:
    if not args.keep_corpus:
      shutil.rmtree(work, ignore_errors=True)
  print(
    f"device: {common.device_description()}; {args.train_steps} steps of a tiny model per size; "
    f"extra flags: {' '.join(args.extra_flag) or 'none'}"
  )
  names = list(next(iter(results.values())))
  print(f"{'':34s}" + "".join(f"{n:>14,d}" for n in sizes))
  for name in names:
    print(f"{name:34s}" + "".join(f"{results[n][name]:14.2f}" for n in sizes))
  rss = [results[n]["peak RSS (MB)"] for n in sizes]
  print(f"peak RSS, largest / smallest corpus: {max(rss) / min(rss):.3f}")


if __name__ == "__main__":
  _define_flags()
  cli.run(main)
