"""The task catalogue: every `--task` name and how a run's configuration picks its data.

* Built-in, generated offline from `--seed` (`train/builtin_tasks.py`).
* TensorFlow Datasets, one table entry each (`train/tfds_tasks.py`).
* `tsv`: local files, one per data role (`train/tsv_tasks.py`).
* `text`: plain text files for the language model, packed or one text a line
  (`train/text_tasks.py`).
"""

import dataclasses

from train.builtin_tasks import builtin_task
from train.flag_choices import BUILTIN_TASKS, TASK_NAMES, TEXT, TFDS_TASKS, TSV
from train.task import CLASSIFICATION, SEQ2SEQ, Task  # noqa: F401 (the names users import)
from train.text_tasks import text_task
from train.tfds_tasks import tfds_task
from train.tsv_tasks import tsv_task


def get_task(data, seed: int = 0) -> Task:
  """The task a run's data section names (`train.sections.data.Data`: its `task`, data files,
  TFDS `data_dir` and split slices, TSV or text part); `seed` draws the built-in tasks and
  shuffles the files. A ValueError names the problem for an unknown task or bad data.

  Its `packing` (`train.batching.Packing`) is the one path by which a run's choice of packing
  reaches the kind's `dataset`, in training and evaluate-only runs alike: the language model's
  `--text_packing` (set by `text_task`) and seq2seq's `--pack_examples` (`pairs`;
  `train.kinds.Seq2Seq` packs training batches only)."""
  task = _named_task(data, seed)
  if data.pack_examples:  # seq2seq tasks only (Data.check)
    task = dataclasses.replace(task, packing=dataclasses.replace(task.packing, pairs=True))
  return task


def _named_task(data, seed) -> Task:
  name = data.task
  if name in BUILTIN_TASKS:
    return builtin_task(name, seed, num_train=data.builtin_train_examples)
  if name in TFDS_TASKS:
    splits = data.tfds
    return tfds_task(
      name, data.data_dir, splits.train_split, splits.validation_split, splits.test_split
    )
  if name == TSV:
    return tsv_task(
      data.train_file,
      data.validation_file,
      data.test_file,
      data.tsv.tsv_kind,
      seed=seed,
      bad_lines=data.tsv.bad_lines,
    )
  if name == TEXT:
    return text_task(
      data.train_file,
      data.validation_file,
      data.test_file,
      data.text.text_packing,
      data.text.text_documents,
      seed=seed,
    )
  raise ValueError(f"unknown task {name!r}; choose one of {list(TASK_NAMES)}")
