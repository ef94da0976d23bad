"""The values the choice flags of `python -m train` accept, declared without TensorFlow.

`train/sections/` builds its flags from these, so `python -m train --help` and a mistyped
flag answer before TensorFlow loads (its import is most of a program's ~3 s start). Each module
that implements a name takes it from here, and tests/train/test_run_config.py checks that the
registries (the built-in task makers, the TFDS table) hold exactly these names.
"""

# --task: generated offline (train/builtin_tasks.py), TensorFlow Datasets (one entry each of
# train/tfds_tasks.DATASETS), local TSV files (train/tsv_tasks.py), plain text (train/kinds.py).
BUILTIN_TASKS = ("numbers", "copy", "reverse", "sort", "addition")
TFDS_TASKS = (
  "imdb_reviews",
  "ted_hrlr_translate/pt_to_en",
  "wmt14_translate/de-en",
  "tiny_shakespeare",
  "wmt14_translate/en-de",
)
TSV, TEXT = "tsv", "text"
TASK_NAMES = BUILTIN_TASKS + TFDS_TASKS + (TSV, TEXT)

# --text_packing (train/language_model_data.py): a packed token stream (attention across
# documents, or restarted at each by segment ids), or one example a line.
TEXT_BLOCKS, TEXT_DOCUMENTS, TEXT_LINES = "blocks", "documents", "lines"
TEXT_PACKINGS = (TEXT_BLOCKS, TEXT_DOCUMENTS, TEXT_LINES)

# --tokenizer (train/tokenizer.py).
SENTENCEPIECE, WORDPIECE, CHARACTER, BYTE = "sentencepiece", "wordpiece", "char", "byte"
TOKENIZERS = (SENTENCEPIECE, WORDPIECE, CHARACTER, BYTE)

# --strategy (train/distribute.py).
STRATEGIES = ("auto", "mirrored", "multi_worker", "one_device")

# The automatic --steps_per_loop. On a GPU a step is ~1 ms of device work behind ~16 ms of host
# time when the host reads every step (issue 31): many steps per call. On the CPU the device is
# the host, so what a loop saves is the per-call overhead; the value measured best on a 2-core
# CPU (WORKSPACE_NOTES, issue 31). Loops still end at every log, checkpoint and evaluation step.
GPU_STEPS_PER_LOOP = 1000
CPU_STEPS_PER_LOOP = 50
