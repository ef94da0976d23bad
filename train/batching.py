"""How a kind's examples become batches (`TrainingKind.dataset`): two small typed objects that
the run builds from its data section and hands to the kind.

* `Batching`: the batch size, the length limit, the shuffle and the padding buckets.
* `Packing`: several examples in one row: the language model's `--text_packing` and
  seq2seq's `--pack_examples`.
"""

import dataclasses
from typing import Any, Dict, Optional

from tfattn.special_ids import START_ID
from train.flag_choices import TEXT_LINES


@dataclasses.dataclass(frozen=True)
class Batching:
  """Batches of `[batch, length]` tensors.

  Attributes:
    batch_size: rows a batch (a worker's share of the global batch).
    max_length: the longest example, in tokens.
    shuffle_seed: training shuffles with it; None (evaluation): in order, once.
    training: repeat the examples and drop a last partial batch (equal replica shards).
    start_id: the model's decoder start (a kind without a decoder input ignores it).
    truncate: which end of a long text a classifier cuts ("right" or "left").
    batch_tokens: with it, a batch holds as many examples of its length bucket as fit.
    multiple_of: rows a batch is a multiple of (local replicas).
    pad_to_bucket: pad every batch to its bucket length (a few shapes under XLA).
  """

  batch_size: int
  max_length: int
  shuffle_seed: Optional[int] = None
  training: bool = False
  start_id: int = START_ID
  truncate: str = "right"
  batch_tokens: Optional[int] = None
  multiple_of: int = 1
  pad_to_bucket: bool = False

  def keywords(self) -> Dict[str, Any]:
    """The keyword arguments of `train.data`'s and `train.language_model_data`'s batchers."""
    return dict(
      batch_size=self.batch_size,
      max_length=self.max_length,
      shuffle_seed=self.shuffle_seed if self.training else None,
      repeat=self.training,
      drop_remainder=self.training,
      batch_tokens=self.batch_tokens,
      multiple_of=self.multiple_of,
      pad_to_bucket=self.pad_to_bucket,
    )

  def replace(self, **changes) -> "Batching":
    return dataclasses.replace(self, **changes)


@dataclasses.dataclass(frozen=True)
class Packing:
  """Several examples in one row.

  Attributes:
    text: the language model's `--text_packing`: "lines" (one example a line, not packed),
      "blocks" or "documents" (`train/language_model_data.py`).
    shuffle_tokens: packed text: the shuffle buffer, in tokens (None: the batcher's).
    pairs: seq2seq's `--pack_examples` (training batches only, `train/packing.py`).
  """

  text: str = TEXT_LINES
  shuffle_tokens: Optional[int] = None
  pairs: bool = False


NO_PACKING = Packing()
