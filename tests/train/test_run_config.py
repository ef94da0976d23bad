"""train.run_config: one declaration per setting; resolution, checks, saved configurations."""

import dataclasses
import json
import re
import types

import pytest

import settings
from tfattn.config import TransformerConfig
from tfattn.decode_options import DecodeOptions
from train import recipes, tasks
from train.builtin_tasks import builtin_task
from train.run_config import UNSET_DEFAULTS, RunConfig


def test_every_setting_is_declared_with_help():
  for field, spec in settings.leaves(RunConfig):
    assert spec.help.strip(), field.name


def test_unset_defaults_come_from_the_declarations():
  assert UNSET_DEFAULTS["label_smoothing"] == 0.1 and UNSET_DEFAULTS["schedule"] == "noam"
  assert UNSET_DEFAULTS["lower_case"] is False
  resolved = RunConfig.of().resolved()
  assert resolved.optimizer.label_smoothing == 0.1 and resolved.loop.keep_checkpoints == 3


@pytest.mark.parametrize(
  "changes,message",
  [
    (dict(batch_size=0), "--batch_size must be positive, got 0"),
    (dict(train_steps=-5), "--train_steps must be >= 0, got -5"),
    (dict(dropout=1.5), "--dropout must be in [0, 1), got 1.5"),
    (dict(task="nope"), "--task must be one of"),
    (dict(average_checkpoints=5, keep_checkpoints=3), "needs --keep_checkpoints >= it"),
    (dict(batch_tokens=8, max_length=16), "must hold at least one --max_length"),
    (dict(clip_norm=1.0, mixed_precision="mixed_float16"), "--clip_norm with"),
    (dict(keep_best_by="bleu", average_checkpoints=5), "give one of them"),
    (dict(train_split="train"), "--train_split applies to TFDS tasks only"),
    (dict(decode=dict(beam_size=0)), "--beam_size must be >= 1, got 0"),
    (dict(position_encoding="rotary"), "--position_encoding must be one of"),
    (dict(activation="mish"), "--activation must be one of"),
    (dict(embedding_init="xavier"), "--embedding_init must be one of"),
    (dict(optimizer="sgd"), "--optimizer must be one of"),
    (dict(optimizer="adam", weight_decay=0.1), "--weight_decay needs --optimizer=adamw"),
    (dict(adam_beta2=1.0), "--adam_beta2 must be in (0, 1), got 1.0"),
    (dict(schedule="rsqrt", min_learning_rate=1e-4), "--min_learning_rate is where"),
    (dict(learning_rate=1e-3, min_learning_rate=1e-3), "must be below --learning_rate"),
  ],
)
def test_check_names_the_first_impossible_setting(changes, message):
  with pytest.raises(ValueError, match=re.escape(message)):
    RunConfig.of(**changes).check()


def test_keep_best_by_must_be_a_metric_of_the_kind():
  RunConfig.of(keep_best_by="bleu").check(kind="seq2seq")
  RunConfig.of(keep_best_by="token_accuracy").check(kind="language_model")
  with pytest.raises(ValueError, match="not a classification metric"):
    RunConfig.of(keep_best_by="bleu").check(kind="classification")


def test_explicit_model_preset_is_not_resized_by_the_task():
  task = builtin_task("numbers", num_train=10, num_eval=2, num_test=2)
  resolved = RunConfig.of(model="base").resolved_for(task)
  assert (resolved.model.d_model, resolved.model.num_layers, resolved.model.dff) == (None,) * 3
  config = resolved.model_config(100, 100, 2)
  assert (config.d_model, config.num_encoder_layers, config.dff) == (512, 6, 2048)
  default = RunConfig.of().resolved_for(task)
  assert (default.model.preset, default.model.d_model) == ("tiny", 128)


def test_decoding_options_layer_like_every_other_setting():
  """Explicit flags > recipe > task > DecodeOptions' own defaults, option by option."""
  config = RunConfig.of(decode=dict(alpha=1.0)).resolved(
    dict(decode=dict(beam_size=2, alpha=0.2)), dict(decode=dict(strategy="greedy"))
  )
  assert config.decode_options() == DecodeOptions(strategy="greedy", beam_size=2, alpha=1.0)
  assert RunConfig.of().resolved().decode_options() == DecodeOptions()


def test_recipes_set_only_declared_settings_and_decoding_options():
  fields = {settings.flag_name(f) for f, _ in settings.leaves(RunConfig)}
  for recipe in recipes.RECIPES.values():
    assert set(recipe.values) <= fields, recipe.name
    DecodeOptions(**recipe.values.get("decode", {}))
    assert recipe.anchors and recipe.data and recipe.dataset
    RunConfig.of(**recipe.values).check(kind=recipe.kind)
  assert "multi30k_de_en: a German<TAB>English TSV" in recipes.help_text()


def test_a_recipe_sets_every_value_it_names():
  """A recipe fills only unset (None) fields: a field declared with a value of its own would
  keep that value and silently ignore the recipe's."""
  for name, recipe in recipes.RECIPES.items():
    task = types.SimpleNamespace(kind=recipe.kind, defaults={})
    task_name = "text" if recipe.kind == "language_model" else "numbers"  # text_packing's part
    resolved = RunConfig.of(recipe=name, task=task_name).resolved_for(task)
    for key, value in recipe.values.items():
      if key != "decode":
        assert resolved.flat()[key] == value, (name, key)


def test_task_defaults_are_declared_settings():
  fields = {settings.flag_name(f) for f, _ in settings.leaves(RunConfig)}
  for name in tasks.TASK_NAMES:
    if name in tasks.BUILTIN_TASKS:
      defaults = builtin_task(name, num_train=5, num_eval=1, num_test=1).defaults
      assert set(defaults) <= fields


def test_save_and_load_round_trip(tmp_path):
  config = RunConfig.of(task="copy", d_model=32, decode=DecodeOptions(beam_size=2).to_dict())
  config.save(str(tmp_path / "run_config.json"))
  assert RunConfig.load(str(tmp_path / "run_config.json")) == config


def test_configurations_saved_by_earlier_versions_load(tmp_path):
  path = tmp_path / "run_config.json"
  # Before feed_forward_dropout: the hidden layer dropped at `dropout`.
  path.write_text(json.dumps({"task": "numbers", "dropout": 0.3}))
  assert RunConfig.load(str(path)).model.feed_forward_dropout == 0.3
  path.write_text(json.dumps({"task": "numbers", "dropout": 0.3, "feed_forward_dropout": 0.0}))
  assert RunConfig.load(str(path)).model.feed_forward_dropout == 0.0
  # Before attention_dropout: attention weights were never dropped, whatever `dropout` was.
  assert RunConfig.load(str(path)).model.attention_dropout == 0.0
  # Before DecodeOptions and the data roles.
  path.write_text(
    json.dumps({"task": "tsv", "eval_file": "dev.tsv", "eval_beam_size": 4, "eval_alpha": 0.8})
  )
  loaded = RunConfig.load(str(path))
  assert loaded.data.validation_file == "dev.tsv"
  assert loaded.decode_options() == DecodeOptions(strategy="beam", beam_size=4, alpha=0.8)
  path.write_text(json.dumps({"task": "imdb_reviews", "eval_beam_size": None}))
  loaded = RunConfig.load(str(path))
  assert dataclasses.astuple(loaded.data.tfds) == ("train", "test", "")
  # When export_decode could be "auto" (xla on a GPU machine): now the graph export.
  path.write_text(json.dumps({"task": "numbers", "export_decode": "auto"}))
  loaded = RunConfig.load(str(path))
  assert loaded.export.export_decode == "graph"
  loaded.check()
  assert RunConfig.of().export.export_decode == "graph"
  # Before positions, activation and optimizer were settings: what those runs used.
  path.write_text(json.dumps({"task": "numbers"}))
  loaded = RunConfig.load(str(path))
  assert (loaded.model.position_encoding, loaded.model.activation) == ("sinusoidal", "relu")
  assert loaded.model.embedding_init == "paper"
  optimizer = loaded.optimizer
  assert (optimizer.name, optimizer.weight_decay, optimizer.adam_beta2) == ("adam", 0.0, 0.98)
  assert optimizer.min_learning_rate == 0.0


def test_the_effective_configuration_is_logged_in_readable_columns():
  config = RunConfig.of(decode=dict(strategy="beam", beam_size=4, alpha=0.6), train_steps=50)
  text = config.describe()
  values = {k: v for k, v in config.flat().items() if v is not None}
  values["decode"] = {**DecodeOptions().read(), "beam_size": 4, "alpha": 0.6}
  del values["decode"]["max_decode_length"]  # None: not shown
  expected = [f"{k}={v}" for k, v in values.items()]
  long_values = [item for item in expected if len(item) > 30]
  for item in expected:
    assert text.count(item) == 1, item
  lines = text.splitlines()
  assert len(lines) < len(expected) and all(line.startswith("  ") for line in lines)
  assert all(len(line) <= 100 for line in lines if line.strip() not in long_values)
  assert [line.strip() for line in lines[-len(long_values) :]] == long_values


def test_the_flag_choices_are_the_names_of_the_registries():
  """train/flag_choices.py declares the names without TensorFlow; the registries implement
  exactly them, in the same order (the order --help lists them in)."""
  from train import builtin_tasks, flag_choices, tfds_tasks

  assert tuple(builtin_tasks.MAKERS) == flag_choices.BUILTIN_TASKS
  assert tuple(tfds_tasks.DATASETS) == flag_choices.TFDS_TASKS


@pytest.mark.slow  # a fresh interpreter, to see what an import brings in
def test_the_flags_are_defined_and_checked_without_tensorflow():
  import subprocess
  import sys

  code = (
    "import sys; import cli, tfattn, train.run_config, train.resume, train.flag_choices, "
    "tfattn.decode_options, tfattn.kinds, train.recipes; "
    "print(sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'numpy')))"
  )
  result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
  assert result.returncode == 0, result.stderr
  assert result.stdout.strip() == "[]"


def test_the_attention_window_reaches_the_model_and_unset_means_full_attention():
  task = builtin_task("numbers", num_train=10, num_eval=2, num_test=2)
  windowed = RunConfig.of(attention_window=8).resolved_for(task).model_config(100, 100, 2)
  assert windowed.attention_window == 8
  assert RunConfig.of().resolved_for(task).model_config(100, 100, 2).attention_window is None
  with pytest.raises(ValueError, match=re.escape("--attention_window must be positive, got 0")):
    RunConfig.of(attention_window=0).check()


def test_model_settings_are_the_models_declarations_and_all_reach_the_model():
  model_fields = {field.name: spec for field, spec in settings.declared(TransformerConfig)}
  referring = {
    field.name: spec for field, spec in settings.leaves(RunConfig) if "refers_to" in spec.extra
  }
  assert {"d_model", "num_layers", "dropout", "attention_window", "max_length"} <= set(referring)
  for name, spec in referring.items():
    model = model_fields[spec.extra["refers_to"][0]]
    bounds = ("minimum", "maximum", "above", "below")
    assert [getattr(spec, b) for b in bounds] == [getattr(model, b) for b in bounds], name
    assert spec.allowed() == model.allowed(), name
  config = RunConfig.of(
    model="tiny",
    d_model=32,
    num_heads=2,
    dff=48,
    num_layers=1,
    dropout=0.2,
    max_length=40,
    seed=5,
    attention_window=3,
    feed_forward_dropout=0.1,
    attention_dropout=0.15,
    norm_position="pre",
    position_encoding="learned",
    activation="gelu",
    embedding_init="gpt2",
  ).model_config(50, 60, 2)
  assert (config.d_model, config.num_heads, config.dff) == (32, 2, 48)
  assert (config.num_encoder_layers, config.num_decoder_layers, config.max_length) == (1, 1, 40)
  assert (config.dropout_rate, config.feed_forward_dropout_rate, config.seed) == (0.2, 0.1, 5)
  assert config.attention_dropout_rate == 0.15
  assert (config.attention_window, config.norm_position) == (3, "pre")
  assert (config.position_encoding, config.activation) == ("learned", "gelu")
  assert config.embedding_init == "gpt2"
  assert (config.source_vocab_size, config.target_vocab_size) == (50, 60)


def test_a_text_run_saved_before_packing_resumes_one_text_a_line(tmp_path):
  """--text_packing is new (issue 41): a run saved before it read one text a line, and resumes
  so; a new run packs. Documents mode needs full attention: said before any data is read."""
  path = tmp_path / "run_config.json"
  path.write_text(json.dumps({"task": "text", "train_file": "train.txt"}))
  assert RunConfig.load(str(path)).data.text.text_packing == "lines"
  text = RunConfig.of(task="text").data.text
  assert text.text_packing == "blocks" and text.text_documents == "file"
  with pytest.raises(ValueError, match=re.escape("--text_packing=documents masks attention")):
    RunConfig.of(task="text", text_packing="documents", attention_window=4).check()


def test_a_language_models_start_up_configuration_leaves_out_what_does_not_apply():
  """Issue 41: a language model's start shows no tsv_kind, no translation decoding, no
  classification truncation; the decoding options its export generates with stay, as its
  strategy reads them."""
  config = RunConfig.of(task="text", train_file="t.txt").resolved(
    {"decode": {"strategy": "greedy"}}
  )
  shown = config.for_kind("language_model").describe()
  for absent in ("tsv_kind", "truncate", "shared_vocabulary", "bad_lines", "beam_size", "alpha"):
    assert absent not in shown, absent
  assert "'strategy': 'greedy'" in shown and "train_file=t.txt" in shown
  assert config.data.tsv is None  # a text task has no TSV part
  assert "tsv_kind=seq2seq" in RunConfig.of(task="tsv").describe()
  beam = RunConfig.of(decode=dict(strategy="beam", beam_size=4)).resolved()
  assert "'beam_size': 4" in beam.for_kind("seq2seq").describe()
  assert "decode=" not in beam.for_kind("classification").describe()


def test_what_a_start_up_configuration_shows_follows_the_kinds_attributes(monkeypatch):
  """Issue 40: each section asks the kind what it reads (`decodes`, `truncates`,
  `shares_vocabulary`), never its name, so a new kind needs no line in a section."""
  from types import SimpleNamespace

  from train import run_config

  made_up = SimpleNamespace(decodes=False, truncates=True, shares_vocabulary=False)
  monkeypatch.setitem(run_config.MODEL_KINDS, "made_up", made_up)
  config = RunConfig.of(truncate="left", shared_vocabulary=False).resolved()
  shown = config.for_kind("made_up").describe()
  assert "truncate=left" in shown
  assert "decode=" not in shown and "export_decode" not in shown
  assert "shared_vocabulary" not in shown
  made_up.decodes, made_up.truncates, made_up.shares_vocabulary = True, False, True
  shown = config.for_kind("made_up").describe()
  assert "decode=" in shown and "shared_vocabulary=False" in shown and "truncate" not in shown


def test_a_language_model_task_generates_greedily_unless_told():
  from train import kinds
  from train.task import LANGUAGE_MODEL_DEFAULTS

  assert LANGUAGE_MODEL_DEFAULTS["decode"] == {"strategy": "greedy"}

  assert kinds.of("language_model").tsv_defaults["decode"] == {"strategy": "greedy"}


@pytest.mark.parametrize("kind", ["seq2seq", "classification", "language_model"])
def test_position_encoding_and_activation_reach_every_kinds_model(kind):
  from tfattn.layers import ACTIVATIONS
  from tfattn.position import LearnedPosition, SinusoidalPosition
  from train import kinds

  for positions, activation, position_class in (
    ("learned", "gelu", LearnedPosition),
    (None, None, SinusoidalPosition),  # unset: the paper's
  ):
    run = RunConfig.of(
      model="tiny",
      d_model=16,
      dff=32,
      num_layers=1,
      position_encoding=positions,
      activation=activation,
    ).resolved()
    model = kinds.of(kind).build_model(run.model_config(40, 40, 2))
    modules = model.submodules
    assert {type(m) for m in modules if "position" in m.name} == {position_class}
    feed_forwards = [m for m in modules if m.name == "feed_forward"]
    assert feed_forwards and all(
      m.activation is ACTIVATIONS[activation or "relu"] for m in feed_forwards
    )


def test_a_section_that_does_not_apply_is_empty():
  """The data parts of one kind of task each are None for the others; a TFDS split given to
  another task is told, not dropped."""
  assert RunConfig.of(task="tsv").data.tsv.tsv_kind == "seq2seq"
  assert RunConfig.of(task="tsv").data.text is None and RunConfig.of(task="tsv").data.tfds is None
  assert RunConfig.of(task="imdb_reviews", train_split="train").data.tfds.train_split == "train"
  assert (RunConfig.of().data.tsv, RunConfig.of().data.text, RunConfig.of().data.tfds) == (
    None,
  ) * 3
  assert (
    "text_packing" not in RunConfig.of().flat()
    and "text_packing" in RunConfig.of(task="text").flat()
  )
  with pytest.raises(ValueError, match="--validation_split applies to TFDS tasks only"):
    RunConfig.of(task="tsv", validation_split="x")


def test_flat_names_reach_their_sections_and_come_back():
  config = RunConfig.of(model="base", optimizer="adamw", weight_decay=0.1, task="text")
  assert config.model.preset == "base" and config.optimizer.name == "adamw"
  assert config.flat()["model"] == "base" and config.flat()["optimizer"] == "adamw"
  assert RunConfig.of(**config.flat()) == config
  assert config.replace(d_model=64).model.d_model == 64
  with pytest.raises(ValueError, match="unknown RunConfig settings"):
    RunConfig.of(no_such_setting=1)


def test_model_settings_take_their_unset_values_from_the_model():
  """Not restated: an unset model setting that no preset sizes becomes the model's default."""
  defaults = {f.name: f.default for f in dataclasses.fields(TransformerConfig)}
  model = RunConfig.of().resolved().model
  assert model.norm_position == defaults["norm_position"]
  assert model.layer_norm_epsilon == defaults["layer_norm_epsilon"]
  assert model.attention_dropout == defaults["attention_dropout_rate"]
  assert model.d_model is None  # the preset's (or the task's)
