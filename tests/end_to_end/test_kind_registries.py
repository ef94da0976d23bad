"""A task kind is one object per layer: the model (`tfattn/kinds.py`), training
(`train/kinds.py`) and export (`serving/export/`). Every layer must know the same kinds, each
object must provide what its layer's Protocol writes down, and a kind's name is what a run
records in task.json."""

from serving import export
from tfattn import kinds as model_kinds
from train import kinds as training_kinds
from train import tasks


def test_every_registry_holds_the_same_kinds():
  names = set(model_kinds.MODEL_KINDS)
  assert names == set(training_kinds.TRAINING_KINDS) == set(export.EXPORT_KINDS)
  # The kinds of today stay; a new kind needs no line here.
  assert names >= {model_kinds.SEQ2SEQ, model_kinds.CLASSIFICATION, model_kinds.LANGUAGE_MODEL}


def test_each_kind_object_provides_its_layers_protocol():
  for name in model_kinds.MODEL_KINDS:
    model, training, exporting = (
      model_kinds.MODEL_KINDS[name],
      training_kinds.TRAINING_KINDS[name],
      export.EXPORT_KINDS[name],
    )
    assert isinstance(model, model_kinds.ModelKind)
    assert isinstance(training, training_kinds.TrainingKind)
    assert isinstance(exporting, export.ExportKind)
    for kind in (training, exporting):  # the model layer's facts are the same everywhere
      assert kind.name == name and kind.vocabulary_sides == model.vocabulary_sides


def test_every_task_names_a_known_kind_and_every_kind_has_a_task(tmp_path):

  import settings
  from train import tfds_tasks
  from train.builtin_tasks import builtin_task
  from train.run_config import RunConfig
  from train.text_tasks import text_task

  text_file = tmp_path / "train.txt"
  text_file.write_text("a line of text\n")
  kinds_used = {name: builtin_task(name, 0).kind for name in tasks.BUILTIN_TASKS}
  kinds_used.update({name: tfds_tasks.DATASETS[name].kind for name in tasks.TFDS_TASKS})
  kinds_used[tasks.TEXT] = text_task(str(text_file)).kind
  for name, kind in kinds_used.items():
    assert kind in model_kinds.MODEL_KINDS, (name, kind)
  # No kind without a task: a built-in, TFDS or text task, or local files (`--tsv_kind`).
  field = next(f for f, _ in settings.leaves(RunConfig) if f.name == "tsv_kind")
  tsv_kinds = set(settings.spec_of(field).allowed())
  assert tsv_kinds == set(model_kinds.MODEL_KINDS)
  assert set(kinds_used.values()) <= tsv_kinds


def test_a_kinds_tables_are_its_own_attributes():
  """What differs by kind is an attribute of the kind object (issue 40), not a table keyed by
  kind name elsewhere: the metrics with their direction, the TFRecord features, the TSV
  defaults, the shared-vocabulary rule."""

  import pytest
  import tensorflow as tf

  import settings
  from train.run_config import RunConfig

  for name, kind in model_kinds.MODEL_KINDS.items():
    assert set(kind.best_by.values()) <= {model_kinds.HIGHER, model_kinds.LOWER}, name
    assert all(tf.as_dtype(dtype) for _, dtype in kind.example_features), name
    assert isinstance(training_kinds.TRAINING_KINDS[name].tsv_defaults.get("model", ""), str)
    with_shared = RunConfig.of(shared_vocabulary=True)
    if kind.shares_vocabulary:
      with_shared.check(kind=name)
    else:
      with pytest.raises(ValueError, match="--shared_vocabulary is for"):
        with_shared.check(kind=name)
  assert model_kinds.MODEL_KINDS["language_model"].best_by["perplexity"] == model_kinds.LOWER
  field = next(f for f, _ in settings.leaves(RunConfig) if f.name == "keep_best_by")
  assert set(settings.spec_of(field).allowed()) == {
    metric for kind in model_kinds.MODEL_KINDS.values() for metric in kind.best_by
  }
