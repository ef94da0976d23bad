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


def get_task(config) -> Task:
  """The task a run configuration names (its `task`, `seed`, data files, TFDS `data_dir` and
  split slices); a ValueError naming the problem for an unknown task or bad data.

  Its `dataset_options` are the one path by which a run's choices of how examples become
  batches reach the kind's `dataset`, in training and evaluate-only runs alike: the language
  model's `--text_packing` (set by `text_task`) and seq2seq's `--pack_examples` (`pack`;
  `train.kinds.Seq2Seq` packs training batches only)."""
  task = _named_task(config)
  if config.pack_examples:  # seq2seq tasks only (RunConfig.check)
    task = dataclasses.replace(task, dataset_options={**task.dataset_options, "pack": True})
  return task


def _named_task(config) -> Task:
  name = config.task
  if name in BUILTIN_TASKS:
    return builtin_task(name, config.seed, num_train=config.builtin_train_examples)
  if name in TFDS_TASKS:
    return tfds_task(
      name, config.data_dir, config.train_split, config.validation_split, config.test_split
    )
  if name == TSV:
    return tsv_task(
      config.train_file,
      config.validation_file,
      config.test_file,
      config.tsv_kind,
      seed=config.seed,
      bad_lines=config.bad_lines,
    )
  if name == TEXT:
    return text_task(
      config.train_file,
      config.validation_file,
      config.test_file,
      config.text_packing,
      config.text_documents,
      seed=config.seed,
    )
  raise ValueError(f"unknown task {name!r}; choose one of {list(TASK_NAMES)}")
