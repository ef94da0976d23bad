"""`RunConfig`: everything a training run is started with, in frozen, declared sections that each
consumer reads on its own (the shape of tensorflow/models' `ExperimentConfig`). Where a new
setting goes, and how one is declared: `train/sections/__init__.py`.

The flags of `python -m train` keep the settings' flat names, and so do `run_config.json`, the
recipes and the task defaults (`RunConfig.of`, `flat`). A section that does not apply to a run
is None (a TFDS run has no `data.text`), and so is a setting its kind does not read
(`for_kind`): the start-up log shows what is left.
"""

import dataclasses
import json
from typing import Any, Dict, Optional

import settings
from tfattn.config import TransformerConfig
from tfattn.decode_options import DecodeOptions
from tfattn.kinds import MODEL_KINDS
from train import recipes
from train.files import write_json_atomically
from train.sections.data import Data
from train.sections.declare import FOLLOWS_MACHINE, MAY_CHANGE, MUST_MATCH, columns, run_setting
from train.sections.device import Device
from train.sections.export import Export
from train.sections.loop import Loop
from train.sections.model import MODEL_SIZE_FIELDS, Model
from train.sections.optimizer import Optimizer
from train.sections.vocabulary import Vocabulary


@dataclasses.dataclass(frozen=True)
class RunConfig:
  """The settings of one training run (None: the recipe's, then the task's value, then the
  declared fallback). Build one from flat names with `RunConfig.of(task=..., d_model=...)`."""

  run_dir: str = run_setting(
    "runs/default",
    "Run directory: config, vocabularies, checkpoints, logs. Reuse it to resume.",
    resume=FOLLOWS_MACHINE,
  )
  recipe: Optional[str] = run_setting(
    None,
    recipes.help_text(),
    choices=tuple(sorted(recipes.RECIPES)),
    unset="none",
    resume=MAY_CHANGE,
  )
  seed: int = run_setting(
    0,
    "Seed for data generation, initialisation, shuffling, dropout.",
    refers_to=("seed",),
    resume=MUST_MATCH,
  )
  data: Data = settings.part(Data)
  vocabulary: Vocabulary = settings.part(Vocabulary)
  model: Model = settings.part(Model)
  optimizer: Optimizer = settings.part(Optimizer)
  loop: Loop = settings.part(Loop)
  device: Device = settings.part(Device)
  export: Export = settings.part(Export)
  decode: Optional[Dict[str, Any]] = run_setting(
    None,
    "DecodeOptions values (flags --decode_strategy, --beam_size, ...): how evaluation "
    "decodes, and what the export serves. None: the run's kind decodes nothing.",
    # Saved before DecodeOptions: evaluation's beam and alpha were their own settings.
    when_missing=lambda saved: DecodeOptions.of_run(saved).to_dict(),
    resume=MAY_CHANGE,
  )

  # --- flat names -----------------------------------------------------------------------

  @classmethod
  def of(cls, **flat) -> "RunConfig":
    """A configuration from flat setting names (flags, recipes, saved runs' names)."""
    return settings.from_flat(cls, flat)

  def flat(self) -> Dict[str, Any]:
    """{flat name: value} of every setting of the sections that apply (`run_config.json`)."""
    return settings.to_flat(self)

  def replace(self, **flat) -> "RunConfig":
    return RunConfig.of(**{**self.flat(), **flat})

  # --- resolution -----------------------------------------------------------------------

  def with_defaults(self, defaults: Dict[str, Any]) -> "RunConfig":
    """Fills every unset (None) setting from flat `defaults` (a recipe's or a task's); their
    `decode` values fill the decoding options not set yet."""
    filled = self.flat()
    for key, value in defaults.items():
      if key == "decode":
        filled["decode"] = {**(value or {}), **(filled.get("decode") or {})}
      elif filled.get(key) is None:
        filled[key] = value
    return RunConfig.of(**filled)

  def resolved(self, *defaults: Dict[str, Any]) -> "RunConfig":
    """Fills unset settings from each of `defaults` in turn, then from the declared
    `when_unset`; the decoding options become complete (DecodeOptions' own defaults last)."""
    config = self
    for values in (*defaults, UNSET_DEFAULTS):
      config = config.with_defaults(values)
    return config.replace(decode=config.decode_options().to_dict())

  def resolved_for(self, task) -> "RunConfig":
    """Explicit values, then the recipe, then the task's defaults, then `when_unset`; checked
    against the task's kind, without what the kind does not read. An explicit --model preset
    is not resized by the recipe's or the task's sizes."""
    layers = (recipes.recipe_values(self.recipe, task.kind),) if self.recipe else ()
    layers += (task.defaults,)
    if self.model.preset is not None:
      layers = tuple(
        {k: v for k, v in layer.items() if k not in MODEL_SIZE_FIELDS} for layer in layers
      )
    config = self.resolved(*layers)
    config.check(kind=task.kind)
    return config.for_kind(task.kind)

  def for_kind(self, kind: str) -> "RunConfig":
    """Without the settings the kind does not read: each section says which."""
    return dataclasses.replace(
      self,
      data=self.data.for_kind(kind),
      vocabulary=self.vocabulary.for_kind(kind),
      export=self.export.for_kind(kind),
      decode=self.decode if MODEL_KINDS[kind].decodes else None,
    )

  def decode_options(self) -> DecodeOptions:
    """How this run's outputs are decoded, in evaluation and in its export."""
    return DecodeOptions(**(self.decode or {}))

  # --- checks ---------------------------------------------------------------------------

  def check(self, kind: Optional[str] = None) -> None:
    """Raises ValueError for the first impossible value or combination: each setting's own
    bounds, then each section's rules. Unset (None) settings are skipped, so this runs on the
    flags before any data is touched, and again with the task's `kind` once resolved."""
    settings.check(self)  # every section's settings, each against its declaration
    if self.decode:
      settings.check_values(DecodeOptions, self.decode)
    model = self.model
    self.data.check(kind, model.max_length, model.attention_window)
    self.vocabulary.check(kind)
    self.optimizer.check(loss_scaled=self.device.loss_scaled)
    self.loop.check(kind)
    self.device.check()

  def model_config(
    self, source_vocab_size: int, target_vocab_size: int, num_classes: int
  ) -> TransformerConfig:
    """The model this configuration describes, for the given vocabularies (`Model.config`)."""
    return self.model.config(
      source_vocab_size,
      target_vocab_size,
      num_classes,
      seed=self.seed,
      compute_dtype=self.device.compute_dtype,
      share_embeddings=bool(self.vocabulary.shared_vocabulary),
    )

  # --- files ----------------------------------------------------------------------------

  def describe(self, width: int = 100) -> str:
    """The settings that are set, as `name=value` in aligned columns, sorted by name (a long
    value on a line of its own, after them): the effective configuration a run logs at start.
    `decode` shows only the options its strategy reads (`DecodeOptions.read`)."""
    values = {k: v for k, v in self.flat().items() if v is not None}
    if "decode" in values:
      read = DecodeOptions(**values["decode"]).read()
      values["decode"] = {k: v for k, v in read.items() if v is not None}
    return columns(sorted(f"{k}={v}" for k, v in values.items()), width)

  def save(self, path: str) -> None:
    write_json_atomically(path, self.flat())

  @classmethod
  def load(cls, path: str) -> "RunConfig":
    """Reads a saved run configuration, including those saved by earlier versions."""
    with open(path) as f:
      return cls.from_saved(json.load(f))

  @classmethod
  def from_saved(cls, values: Dict[str, Any]) -> "RunConfig":
    """A run_config.json of this version or an earlier one: every setting says what a save
    without it meant (`settings.from_saved`); settings that became DecodeOptions are dropped."""
    return settings.from_saved(cls, values, retired=("eval_beam_size", "eval_alpha"))


# What an unset setting means when neither the recipe nor the task sets it (flat names).
UNSET_DEFAULTS = settings.unset_defaults(RunConfig)
# Settings with no flag of their own (decode's come from DecodeOptions).
FLAGLESS = ("decode",)
