"""A run's vocabularies: learned once from the training examples, then read back from the run
directory (a resumed run reuses the saved files).

What they are learned from is bounded: the first `vocab_examples` training examples, or, for
tasks that ask for it (streamed files, large sorted corpora), a seeded uniform sample of that
many from one pass over every training example (reservoir sampling: memory holds the sample,
never the corpus). With `shared_vocabulary`, one vocabulary is learned from both sides'
text and saved under each side's name.
"""

import contextlib
import os
import time
from typing import Dict, List, Sequence

import numpy as np
import tensorflow as tf
from absl import logging

from tfattn import text
from tfattn.support.run_dir import RunDir
from train import streams, tokenizer
from train.files import write_bytes_atomically

RESERVOIR = "reservoir"
# Examples moved from the pipeline to the sample at a time.
SAMPLE_BATCH = 8192
# Examples read between two progress lines of a sampling pass.
PROGRESS_EVERY = 1_000_000


def reservoir_sample(examples: tf.data.Dataset, size: int, seed: int) -> List[np.ndarray]:
  """A uniform sample of `size` elements of `examples` (tuples of scalars) from one pass, as one
  numpy array per tuple position; all of them, in order, when there are at most `size`.

  Algorithm R, a batch at a time: element i (0-based) replaces slot j ~ U[0, i] when j < size.
  Seeded: the same data and seed give the same sample."""
  rng = np.random.default_rng(seed)
  columns, seen, started, report_at = None, 0, time.time(), PROGRESS_EVERY
  for batch in examples.batch(SAMPLE_BATCH).as_numpy_iterator():
    batch = batch if isinstance(batch, tuple) else (batch,)
    count = len(batch[0])
    if columns is None:
      columns = [np.empty(size, dtype=object) for _ in batch]
    filled = max(0, min(size - seen, count))
    for column, values in zip(columns, batch):
      column[seen : seen + filled] = values[:filled]
    if filled < count:
      slots = rng.integers(0, np.arange(seen + filled, seen + count) + 1)
      kept = slots < size
      for column, values in zip(columns, batch):
        column[slots[kept]] = values[filled:][kept]  # a later duplicate slot wins, as in R
    seen += count
    if seen >= report_at:
      logging.info(
        "vocabulary sample: %d examples read, %d kept (%.0f s)",
        seen,
        min(seen, size),
        time.time() - started,
      )
      report_at += PROGRESS_EVERY
  if columns is None:
    raise ValueError("no training examples to learn a vocabulary from")
  logging.info(
    "vocabulary sample: %d of %d training examples, seed %d (%.1f s)",
    min(seen, size),
    seen,
    seed,
    time.time() - started,
  )
  return [column[: min(seen, size)] for column in columns]


def _texts(task, sides: Sequence[str], config, seed: int) -> Dict:
  """{side: the strings its vocabulary is learned from (a dataset, or an array of bytes)},
  bounded by vocab_examples."""
  if task.vocabulary_sample == RESERVOIR:
    sample = streams.run_stream(lambda: reservoir_sample(task.train(), config.vocab_examples, seed))
    # The arrays themselves: a tensor copy of the sample would add to the peak memory.
    return {side: sample[i] for i, side in enumerate(sides)}
  return {
    side: task.train().map(lambda *pair, i=i: pair[i]).take(config.vocab_examples)
    for i, side in enumerate(sides)
  }


def learn_or_load(task, sides: Sequence[str], config, seed: int, layout: RunDir) -> Dict:
  """{side: in-graph tokenizer}; the vocabulary of side i is learned from the i-th element of
  the task's training examples (both, with `shared_vocabulary`), with the run's vocabulary
  section `config` (`train.sections.vocabulary.Vocabulary`); `seed` draws a reservoir
  sample."""
  paths = {}
  for side in sides:
    with contextlib.suppress(ValueError):  # not learned yet
      paths[side] = text.tokenizer_path(layout.vocab, side)
  if len(paths) < len(sides):
    texts = _texts(task, sides, config, seed)
    learn = lambda strings, side, examples: tokenizer.learn_and_write(  # noqa: E731
      config.tokenizer,
      strings,
      config.vocab_size,
      os.path.join(layout.vocab, side),
      config.lower_case,
      examples,
      character_coverage=config.character_coverage,
    )
    if config.shared_vocabulary:
      # Source and target lines alternate, so the learner sees both languages evenly.
      columns = [texts[side] for side in sides]
      if isinstance(columns[0], tf.data.Dataset):
        both = tf.data.Dataset.zip(tuple(columns)).map(lambda *s: tf.stack(s)).unbatch()
      else:
        both = np.stack(columns, axis=1).reshape(-1)
      shared = learn(both, sides[0], config.vocab_examples * len(sides))
      with open(shared, "rb") as f:
        model = f.read()
      for side in sides[1:]:
        suffix = shared[len(os.path.join(layout.vocab, sides[0])) :]
        write_bytes_atomically(os.path.join(layout.vocab, side) + suffix, model)
    else:
      for side in sides:
        if side not in paths:
          learn(texts[side], side, config.vocab_examples)
    paths = {side: text.tokenizer_path(layout.vocab, side) for side in sides}
  return {side: text.load_tokenizer(paths[side]) for side in sides}
