"""A run's vocabularies: learned once from the training examples, then read back from the run
directory (a resumed run reuses the saved files)."""

import os
from typing import Dict, Sequence

from tfattn import text
from tfattn.run_dir import RunDir
from train import tokenizer


def learn_or_load(task, sides: Sequence[str], config, layout: RunDir) -> Dict:
  """{side: in-graph tokenizer}; the vocabulary of side i is learned from the i-th element of
  the task's training examples, with the run's tokenizer settings."""
  loaded = {}
  for index, side in enumerate(sides):
    try:
      loaded[side] = text.load_tokenizer(text.tokenizer_path(layout.vocab, side))
    except ValueError:  # not learned yet
      path = tokenizer.learn_and_write(
        config.tokenizer,
        task.train().map(lambda *pair, i=index: pair[i]),
        config.vocab_size,
        os.path.join(layout.vocab, side),
        config.lower_case,
        config.vocab_examples,
      )
      loaded[side] = text.load_tokenizer(path)
  return loaded
