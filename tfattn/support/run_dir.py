"""`RunDir`: the layout of a training run directory, owned in one place: paths, nothing else. The
trainer writes the files (`train/run_files.py`), the export and the benchmarks read them, the
tests build them; all name them through here.

  run_config.json    the RunConfig the run was started with (task defaults filled in)
  model_config.json  the TransformerConfig
  task.json          {"name", "kind", "num_classes", "truncate"}
  vocab/             source.model, target.model (SentencePiece), or .txt (WordPiece), .chars
                     (characters), .bytes (UTF-8 bytes)
  checkpoints/       tf.train.CheckpointManager: model, optimizer, step, data iterator, RNG
  checkpoints/best/  --keep_best_by: the weights with the best validation metric, best.json
  tmp_workers/       multi-worker training: the other workers' private checkpoints
  logs/              TensorBoard: scalars, and attention maps as images
  train_log.jsonl    one line a logged step
  eval.json          the latest evaluation: validation (and at the end test) metrics, and
                     which checkpoints the final weights are
"""

import os


class RunDir:
  """The paths of one run directory.

  Args:
    path: the run directory (need not exist yet).
  """

  RUN_CONFIG = "run_config.json"
  MODEL_CONFIG = "model_config.json"
  TASK = "task.json"

  def __init__(self, path: str):
    self.path = str(path)

  def _join(self, *names: str) -> str:
    return os.path.join(self.path, *names)

  @property
  def run_config(self) -> str:
    return self._join(self.RUN_CONFIG)

  @property
  def model_config(self) -> str:
    return self._join(self.MODEL_CONFIG)

  @property
  def task(self) -> str:
    return self._join(self.TASK)

  @property
  def vocab(self) -> str:
    return self._join("vocab")

  @property
  def checkpoints(self) -> str:
    return self._join("checkpoints")

  @property
  def best_checkpoints(self) -> str:
    return self._join("checkpoints", "best")

  def worker_checkpoints(self, task_id: int) -> str:
    """Where a non-chief worker writes (collectives need every worker to save)."""
    return self._join("tmp_workers", f"worker_{task_id}")

  @property
  def logs(self) -> str:
    return self._join("logs")

  @property
  def train_log(self) -> str:
    return self._join("train_log.jsonl")

  @property
  def eval_metrics(self) -> str:
    return self._join("eval.json")
