"""The sections of a run's configuration (`train.run_config.RunConfig`), one file each. A new
setting goes into the section of the consumer that reads it, as one declaration:

  data.py        what the run learns from and how examples become batches (`get_task`,
                 `train.batching`); its parts apply to one kind of task each: `tfds` (split
                 slices), `tsv` (what a line is), `text` (how plain text is packed)
  vocabulary.py  how the tokenizers are learned (`train/vocabularies.py`)
  model.py       the model: a preset, and references to `TransformerConfig`'s own declarations
  optimizer.py   the optimizer, its schedule, the loss and the gradient (`train/optimizer.py`)
  loop.py        how long, how often to log, save and evaluate, which weights it ends with
  device.py      where and in what precision it computes (`train/distribute.py`)
  export.py      what it exports when it finishes (`python -m serving.export`)

Decoding is `DecodeOptions` (`tfattn/decode_options.py`): a new option there declares the
strategies that read it. A declaration (`declare.run_setting`, `declare.model_setting`) holds the
type, default, help, allowed values or range, what an unset value becomes (`when_unset`), what a
run saved before the setting existed meant (`when_missing`) and its resume policy (`resume=`);
the flag, its check, the resume rule and the start-up log all follow from it. A rule between
settings goes into their section's `check`; one across sections into `RunConfig.check`, which
hands each section what it needs of the others.
"""
