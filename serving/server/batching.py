"""Server-side batching: concurrent predict requests for the same version and signature are
merged along the batch axis, run once, and split again (TF Serving's `--enable_batching`)."""

import collections
import dataclasses
import threading
import time

import numpy as np
from absl import logging

from serving.server import config_protos
from serving.server.errors import StatusError


@dataclasses.dataclass
class BatchingParameters:
  """TF Serving's batching_parameters_file fields."""

  max_batch_size: int = 32
  batch_timeout_micros: int = 1000
  max_enqueued_batches: int = 100
  num_batch_threads: int = 4
  allowed_batch_sizes: tuple = ()
  pad_variable_length_inputs: bool = False

  @classmethod
  def from_text_proto(cls, text):
    """A batching_parameters_file (text BatchingParameters, e.g. `max_batch_size { value: 32 }
    allowed_batch_sizes: 8`), read with protobuf's text_format. thread_pool_name only names
    TF Serving's pool; large-batch splitting is not done here (a request over max_batch_size
    runs alone), so its two fields are read and logged as not applied."""
    proto = config_protos.parse(text, config_protos.BatchingParameters)
    values = {
      field.name: getattr(proto, field.name).value
      for field in dataclasses.fields(cls)
      if field.name not in ("allowed_batch_sizes", "pad_variable_length_inputs")
      and proto.HasField(field.name)
    }
    if proto.enable_large_batch_splitting.value:
      logging.warning(
        "batching: enable_large_batch_splitting is not applied: requests larger "
        "than max_batch_size run alone"
      )
    params = cls(
      **values,
      allowed_batch_sizes=tuple(sorted(proto.allowed_batch_sizes)),
      pad_variable_length_inputs=proto.pad_variable_length_inputs,
    )
    for name in ("max_batch_size", "num_batch_threads", "max_enqueued_batches"):
      if getattr(params, name) < 1:
        raise ValueError(f"{name} must be at least 1, got {getattr(params, name)}")
    if params.allowed_batch_sizes and params.allowed_batch_sizes[-1] != params.max_batch_size:
      raise ValueError("the largest allowed_batch_sizes entry must equal max_batch_size")
    return params


class _Task:
  def __init__(self, servable, signature_name, arrays, timeout_seconds, output_names):
    self.servable, self.signature_name, self.arrays = servable, signature_name, arrays
    self.output_names = tuple(output_names or ())
    self.deadline = None if timeout_seconds is None else time.monotonic() + timeout_seconds
    self.rows = next(iter(arrays.values())).shape[0] if arrays else 0
    self.key = (
      id(servable),
      signature_name,
      self.output_names,
      tuple((n, a.dtype.str, a.shape[1:]) for n, a in sorted(arrays.items())),
    )
    self.done = threading.Event()
    self.outputs = self.error = None

  def remaining(self):
    return None if self.deadline is None else self.deadline - time.monotonic()

  def run_alone(self):
    return self.servable.run(self.signature_name, self.arrays, self.remaining(), self.output_names)


class Batcher:
  """Worker threads that each take the oldest request plus compatible ones queued behind it.

  Args:
    params: the `BatchingParameters` (--batching_parameters_file): batch sizes, the wait
      for batch-mates, threads and the queue bound.
  """

  def __init__(self, params: BatchingParameters):
    self.params = params
    self._queue = collections.deque()
    self._queued_rows = 0
    self._cond = threading.Condition()
    self._closed = False
    self._threads = [
      threading.Thread(target=self._work, daemon=True, name=f"batch-{i}")
      for i in range(params.num_batch_threads)
    ]
    for thread in self._threads:
      thread.start()

  def run(self, servable, signature_name, arrays, timeout_seconds=None, output_names=None):
    """Servable.run's answer for this request, computed in a batch with compatible ones (same
    version, signature, outputs, and input shapes past the batch axis)."""
    task = _Task(servable, signature_name, arrays, timeout_seconds, output_names)
    if (
      task.rows == 0
      or task.rows > self.params.max_batch_size
      or any(a.ndim == 0 for a in arrays.values())
    ):
      return task.run_alone()  # cannot be merged
    with self._cond:
      limit = self.params.max_enqueued_batches * self.params.max_batch_size
      if self._queued_rows + task.rows > limit:
        raise StatusError(
          "UNAVAILABLE", "The batch scheduling queue to which this task was submitted is full"
        )
      self._queue.append(task)
      self._queued_rows += task.rows
      self._cond.notify()
    task.done.wait()
    if task.error is not None:
      raise task.error
    return task.outputs

  def _take_batch(self):
    with self._cond:
      while not self._queue:
        if self._closed:
          return None
        self._cond.wait()
      first = self._queue.popleft()
      batch, rows = [first], first.rows
      deadline = time.monotonic() + self.params.batch_timeout_micros / 1e6
      while rows < self.params.max_batch_size:
        compatible = next(
          (
            t
            for t in self._queue
            if t.key == first.key and rows + t.rows <= self.params.max_batch_size
          ),
          None,
        )
        if compatible is not None:
          self._queue.remove(compatible)
          batch.append(compatible)
          rows += compatible.rows
          continue
        remaining = deadline - time.monotonic()
        if remaining <= 0:
          break
        self._cond.wait(remaining)
      self._queued_rows -= rows
      return batch

  def _padded_size(self, rows):
    for size in self.params.allowed_batch_sizes:
      if size >= rows:
        return size
    return rows

  def _work(self):
    while True:
      batch = self._take_batch()
      if batch is None:
        return
      for task in [t for t in batch if t.deadline is not None and t.remaining() <= 0]:
        task.error = StatusError(
          "DEADLINE_EXCEEDED", "Deadline exceeded while the request waited for its batch"
        )
        task.done.set()
        batch.remove(task)
      if batch:
        self._run_batch(batch)

  def _run_batch(self, batch):
    """Runs the merged batch under the latest deadline of its requests (none if one has none),
    then hands each request its rows."""
    first = batch[0]
    rows = sum(t.rows for t in batch)
    try:
      merged = {name: np.concatenate([t.arrays[name] for t in batch]) for name in first.arrays}
      padding = self._padded_size(rows) - rows
      if padding:
        merged = {
          n: np.concatenate([a, np.repeat(a[:1], padding, axis=0)]) for n, a in merged.items()
        }
      remaining = [t.remaining() for t in batch]
      timeout = None if None in remaining else max(remaining)
      outputs = first.servable.run(first.signature_name, merged, timeout, first.output_names)
      if any(o.ndim == 0 or o.shape[0] != rows + padding for o in outputs.values()):
        raise StatusError("INTERNAL", "batched outputs lost their batch dimension")
      start = 0
      for task in batch:
        task.outputs = {n: o[start : start + task.rows] for n, o in outputs.items()}
        start += task.rows
    except StatusError as error:
      if len(batch) == 1:
        first.error = error
      else:  # one bad request must not fail its batch-mates: retry each alone
        for task in batch:
          try:
            task.outputs = task.run_alone()
          except StatusError as single_error:
            task.error = single_error
    except Exception as error:  # never leave a request waiting
      for task in batch:
        task.error = StatusError("INTERNAL", str(error)[:500])
    for task in batch:
      task.done.set()

  def close(self):
    with self._cond:
      self._closed = True
      self._cond.notify_all()
