"""The kinds the export knows: each of `tfattn.kinds`' model kinds, plus the module it saves
(`serving.export.modules`). A new kind adds one class here."""

from typing import TYPE_CHECKING, Dict, Mapping, Protocol, runtime_checkable

from tfattn import kinds
from tfattn.decode_options import DecodeOptions

if TYPE_CHECKING:
  import tensorflow as tf


@runtime_checkable
class ExportKind(kinds.ModelKind, Protocol):
  """What the export needs of a task kind: `tfattn.kinds`' model and vocabularies (ModelKind),
  plus the exported module. Every entry of `EXPORT_KINDS` satisfies it (tested)."""

  def export_module(
    self,
    model: "tf.Module",
    tokenizers: Mapping[str, "tf.Module"],
    task_info: Mapping,
    options: DecodeOptions,
    decode_mode: str,
  ) -> "tf.Module":
    """The module to save (`serving.export.modules`): its `signatures()`, `warmup_requests(texts,
    compiled_only)`, and, when it decodes, `decode_mode` ("graph" or "xla"; None when it
    does not decode), `length_buckets` and the `options` it decodes with.

    Args:
      model: the trained model.
      tokenizers: {side: in-graph tokenizer} for each of `vocabulary_sides`.
      task_info: the run's `task.json`.
      options: how to decode (kinds that do not decode ignore them).
      decode_mode: "graph" or "xla" (resolved; kinds that do not decode ignore it).
    """


class _Seq2SeqExportKind(kinds.Seq2SeqModel):
  def export_module(self, model, tokenizers, task_info, options, decode_mode):
    from serving.export.modules import Seq2SeqExport

    del task_info  # nothing beyond the model config
    return Seq2SeqExport(
      model, tokenizers["source"], tokenizers["target"], options, decode=decode_mode
    )


class _ClassifierExportKind(kinds.ClassifierModel):
  def export_module(self, model, tokenizers, task_info, options, decode_mode):
    from serving.export.modules import ClassifierExport

    del options, decode_mode  # one forward pass: nothing to decode
    return ClassifierExport(
      model, tokenizers["source"], truncate=task_info.get("truncate", "right")
    )


class _LanguageModelExportKind(kinds.LanguageModelKind):
  def export_module(self, model, tokenizers, task_info, options, decode_mode):
    from serving.export.modules import LanguageModelExport

    del task_info  # nothing beyond the model config
    return LanguageModelExport(model, tokenizers["source"], options, decode=decode_mode)


EXPORT_KINDS: Dict[str, ExportKind] = {
  kind.name: kind
  for kind in (_Seq2SeqExportKind(), _ClassifierExportKind(), _LanguageModelExportKind())
}
