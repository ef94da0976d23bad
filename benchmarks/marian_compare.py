"""Imports the checkpoints `benchmarks/marian_reference.py` made and compares tfattn's answers
with transformers' (issue 50): token ids on every text, detokenized text, encoder outputs and
logits (float32, within 1e-4), greedy and beam-4 ids and text at batch 1 and in a mixed batch.
No torch here: transformers' answers are the files beside each checkpoint.

    python benchmarks/marian_compare.py --fixtures=tests/fixtures/marian
    python benchmarks/marian_compare.py --fixtures=/tmp/marian   # with its base-size checkpoint

tests/train/test_import_marian.py runs `compare` on the committed tiny checkpoints.
"""

import cli

import dataclasses
import itertools
import json
import os
import tempfile
import time
from typing import Dict, List, Optional

import numpy as np

from settings import setting

ATOL = 1e-4


@dataclasses.dataclass(frozen=True)
class CompareFlags:
  fixtures: Optional[str] = setting(
    None, "A folder of marian_reference.py's output: texts.txt and one folder a checkpoint."
  )
  out: Optional[str] = setting(None, "Also write the results as JSON here.")


def read_texts(fixtures: str) -> List[str]:
  with open(os.path.join(fixtures, "texts.txt"), encoding="utf-8") as f:
    return [json.loads(line) for line in f]


def ragged(values, lengths) -> List[List[int]]:
  splits = np.concatenate([[0], np.cumsum(lengths)])
  return [values[a:b].astype(np.int64).tolist() for a, b in itertools.pairwise(splits)]


def _until_end(row, end: int) -> List[int]:
  """A generated row up to and including its first END (all of it without one)."""
  row = list(row)
  return row[: row.index(end) + 1] if end in row else row


class Imported:
  """An imported checkpoint, its model and tokenizers, and Marian <-> tfattn ids."""

  def __init__(self, folder: str, run_dir: str):
    from serving.export.trained_run import load_trained, run_decode_options
    from train.import_marian import import_checkpoint

    started = time.perf_counter()
    import_checkpoint(folder, run_dir)
    self.import_seconds = time.perf_counter() - started
    trained = load_trained(run_dir)
    self.model = trained.model
    self.source, self.target = trained.tokenizers["source"], trained.tokenizers["target"]
    self.options = run_decode_options(run_dir)
    with open(os.path.join(folder, "config.json")) as f:
      self.config = json.load(f)
    self.to_tfattn = {
      side: {int(m): i for i, m in enumerate(tokenizer.marian_ids(np.arange(tokenizer.vocab_size)))}
      for side, tokenizer in (("source", self.source), ("target", self.target))
    }

  def tfattn_ids(self, rows, side: str, pad: Optional[int] = None):
    """Marian ids -> tfattn ids (`pad`, Marian's padding id, -> tfattn's PAD 0)."""
    table = self.to_tfattn[side]
    return [[0 if (pad is not None and i == pad) else table[int(i)] for i in row] for row in rows]


def compare(folder: str, texts: List[str], run_dir: str) -> Dict:
  """Every comparison for one checkpoint folder -> {name: result}; `ok` says all held."""
  import tensorflow as tf

  from tfattn import decoding

  expected = dict(np.load(os.path.join(folder, "expected.npz")))
  with open(os.path.join(folder, "expected.json"), encoding="utf-8") as f:
    answers = json.load(f)
  m = Imported(folder, run_dir)
  results = {"import_seconds": round(m.import_seconds, 2)}
  marian_pad, end = m.config["pad_token_id"], m.config["eos_token_id"]

  # Tokenization: every text, source side; the first ones as targets (the pipeline adds END).
  ours = m.source.tokenize(tf.constant(texts)).to_list()
  want = ragged(expected["source_ids"], expected["source_lengths"])
  got = [m.source.marian_ids(row).tolist() for row in ours]
  results["source_texts"] = len(texts)
  results["source_ids_equal"] = sum(a == b for a, b in zip(got, want))
  results["source_mismatches"] = [
    [texts[i], got[i], want[i]] for i in range(len(texts)) if got[i] != want[i]
  ][:3]
  targets = texts[: len(expected["target_lengths"])]
  ours = m.target.tokenize(tf.constant(targets)).to_list()
  want = ragged(expected["target_ids"], expected["target_lengths"])
  got = [[*m.target.marian_ids(row).tolist()[: len(w) - 1], end] for row, w in zip(ours, want)]
  results["target_ids_equal"] = sum(a == b for a, b in zip(got, want))
  results["target_texts"] = len(targets)

  # Detokenization of random rows, special ids included.
  rows = ragged(expected["decode_ids"], expected["decode_lengths"])
  ids = m.tfattn_ids(rows, "target")
  padded = tf.ragged.constant(ids, dtype=tf.int32, ragged_rank=1).to_tensor(0)
  got = [t.decode() for t in m.target.detokenize(padded).numpy()]
  results["decode_rows"] = len(rows)
  results["decode_equal"] = sum(a == b for a, b in zip(got, answers["decode_text"]))
  results["decode_mismatches"] = [
    [r, a, b] for r, a, b in zip(rows, got, answers["decode_text"]) if a != b
  ][:3]

  # Encoder outputs and logits, teacher-forced, on real positions.
  source = np.array(m.tfattn_ids(expected["forward_source"], "source", pad=marian_pad))
  decoder_input = np.array(m.tfattn_ids(expected["forward_decoder_input"], "target"))
  encoder = m.model.encoder(tf.constant(source, tf.int32)).numpy()
  real = source != 0
  results["encoder_max_diff"] = float(np.abs(encoder - expected["forward_encoder"])[real].max())
  logits = m.model(tf.constant(source, tf.int32), tf.constant(decoder_input, tf.int32)).numpy()
  order = m.target.marian_ids(np.arange(1, m.target.vocab_size))
  reference = expected["forward_logits"][..., order]
  # Positions after a row's END read padding (Marian's pad id) in both: compared too.
  results["logits_max_diff"] = float(np.abs(logits[..., 1:] - reference).max())

  # generate(): greedy and beam 4, the mixed batch and alone.
  chosen = answers["generate_texts"]

  searches = {}  # one traced search a set of options: any batch, any length

  def search(texts_, **changes):
    options = m.options.replace(**changes)
    if options not in searches:
      searches[options] = tf.function(
        lambda ids, options=options: decoding.decode(m.model, ids, options),
        input_signature=[tf.TensorSpec([None, None], tf.int32)],
        autograph=False,
      )
    source_ids = m.source.tokenize(tf.constant(texts_)).to_tensor(0)
    found = searches[options](source_ids)
    marian = [_until_end(m.target.marian_ids(row).tolist(), end) for row in found.ids.numpy()]
    text = [t.decode() for t in m.target.detokenize(found.ids).numpy()]
    return marian, text

  def reference_ids(array):
    return [_until_end(row[1:].tolist(), end) for row in array]

  cases = [
    ("greedy_mixed", chosen, dict(strategy="greedy")),
    ("beam_mixed", chosen, dict(strategy="beam", beam_size=4)),
    ("beam_never_mixed", chosen, dict(strategy="beam", beam_size=4, beam_stop="bound")),
  ]
  for i in range(3):
    cases.append((f"greedy_alone{i}", chosen[i : i + 1], dict(strategy="greedy")))
    cases.append((f"beam_alone{i}", chosen[i : i + 1], dict(strategy="beam", beam_size=4)))
  equal = 0
  for name, batch, changes in cases:
    started = time.perf_counter()
    got_ids, got_text = search(batch, **changes)
    results[f"{name}_seconds"] = round(time.perf_counter() - started, 3)
    want_ids = reference_ids(expected[f"{name}_ids"])
    same = got_ids == want_ids and (
      name == "beam_never_mixed" or got_text == answers[f"{name}_text"]
    )
    if not same:
      results[f"{name}_mismatch"] = {"got": got_ids, "want": want_ids, "text": got_text}
    equal += same
  results["generate_cases"] = len(cases)
  results["generate_equal"] = equal
  results["ok"] = bool(
    results["source_ids_equal"] == len(texts)
    and results["target_ids_equal"] == len(targets)
    and results["decode_equal"] == len(rows)
    and results["encoder_max_diff"] <= ATOL
    and results["logits_max_diff"] <= ATOL
    and equal == len(cases)
  )
  return results


def main(argv):
  del argv
  from absl import flags

  f = flags.FLAGS
  if not f.fixtures or not os.path.exists(os.path.join(f.fixtures, "texts.txt")):
    raise cli.UsageError("--fixtures must name a folder that marian_reference.py wrote")
  cli.start_tensorflow_quietly()
  texts = read_texts(f.fixtures)
  report = {}
  with tempfile.TemporaryDirectory() as scratch:
    for name in sorted(os.listdir(f.fixtures)):
      folder = os.path.join(f.fixtures, name)
      if not os.path.exists(os.path.join(folder, "expected.npz")):
        continue
      report[name] = compare(folder, texts, os.path.join(scratch, name))
      r = report[name]
      print(
        f"{name}: {'OK' if r['ok'] else 'DIFFERS'}  source ids {r['source_ids_equal']}/"
        f"{r['source_texts']}  target ids {r['target_ids_equal']}/{r['target_texts']}  "
        f"decode {r['decode_equal']}/{r['decode_rows']}  encoder max |diff| "
        f"{r['encoder_max_diff']:.2e}  logits max |diff| {r['logits_max_diff']:.2e}  "
        f"generate {r['generate_equal']}/{r['generate_cases']}  import {r['import_seconds']} s"
      )
  if f.out:
    with open(f.out, "w") as out:
      json.dump(report, out, indent=1, ensure_ascii=False)
  if not all(r["ok"] for r in report.values()):
    raise cli.RunError("tfattn's answers differ from transformers' (see above)")


if __name__ == "__main__":
  cli.define_flags(CompareFlags)
  cli.run(main)
