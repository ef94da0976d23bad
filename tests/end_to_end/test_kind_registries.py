"""A task kind is one object per layer: the model (`tfattn/kinds.py`), training
(`train/kinds.py`) and export (`serving/export.py`). Every layer must know the same kinds, each
object must provide what its layer's Protocol writes down, and a kind's name is what a run
records in task.json."""

from serving import export
from tfattn import kinds as model_kinds
from train import kinds as training_kinds
from train import tasks


def test_every_registry_holds_the_same_kinds():
  names = set(model_kinds.MODEL_KINDS)
  assert names == set(training_kinds.TRAINING_KINDS) == set(export.EXPORT_KINDS)
  assert names == {model_kinds.SEQ2SEQ, model_kinds.CLASSIFICATION, model_kinds.LANGUAGE_MODEL}


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


def test_every_task_names_a_known_kind():
  kinds_used = {tasks.SEQ2SEQ, tasks.CLASSIFICATION}
  assert kinds_used <= set(model_kinds.MODEL_KINDS)
