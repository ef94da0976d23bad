"""train.import_marian: a Marian / OPUS-MT checkpoint in the Hub's layout -> a tfattn run
directory, exactly: the committed tiny checkpoints (benchmarks/marian_reference.py made them
with transformers and torch, with their expected answers) compared without torch, and the
refusals, one line naming the file and the field."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from benchmarks import marian_compare
from train import import_marian, marian_checkpoint
from train.marian_checkpoint import MarianError

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(__file__)), "fixtures", "marian")
CHECKPOINTS = ("shared", "separate", "multilingual", "odd")


@pytest.fixture(scope="module")
def texts():
  return marian_compare.read_texts(FIXTURES)


def test_the_in_graph_tokenizer_is_marian_tokenizer_on_every_text(texts, tmp_path):
  """The quick part of the comparison below (no decoding): every text's ids, the multilingual
  checkpoint's language tokens included."""
  import numpy as np
  import tensorflow as tf

  folder = os.path.join(FIXTURES, "multilingual")
  imported = marian_compare.Imported(folder, str(tmp_path / "run"))
  expected = np.load(os.path.join(folder, "expected.npz"))
  want = marian_compare.ragged(expected["source_ids"], expected["source_lengths"])
  got = [
    imported.source.marian_ids(row).tolist()
    for row in imported.source.tokenize(tf.constant(texts)).to_list()
  ]
  assert len(texts) >= 1000 and got == want
  assert any(t.startswith(">>fra<<") for t in texts)


@pytest.mark.slow  # ~8 CPU s a checkpoint: its searches trace and run in graph mode
@pytest.mark.parametrize("name", CHECKPOINTS)
def test_an_import_answers_exactly_what_transformers_answers(name, texts, tmp_path):
  """Token ids on 1,200 texts (Unicode, pieces the SentencePiece model lacks, empty lines,
  texts over the limit, language tokens, the special tokens' text), targets, batch_decode on
  random rows, encoder outputs and logits within 1e-4, greedy and beam-4 generate() ids and
  text at batch 1 and in a mixed batch (and early_stopping="never")."""
  result = marian_compare.compare(os.path.join(FIXTURES, name), texts, str(tmp_path / "run"))
  assert result["source_ids_equal"] == len(texts) >= 1000, result["source_mismatches"]
  assert result["target_ids_equal"] == result["target_texts"]
  assert result["decode_equal"] == result["decode_rows"], result["decode_mismatches"]
  assert result["encoder_max_diff"] <= 1e-4 and result["logits_max_diff"] <= 1e-4, result
  mismatches = {k: v for k, v in result.items() if k.endswith("_mismatch")}
  assert result["generate_equal"] == result["generate_cases"] == 9, mismatches
  assert result["ok"]


def _copy(tmp_path, name="shared"):
  folder = tmp_path / name
  shutil.copytree(os.path.join(FIXTURES, name), folder)
  return folder


def _edit(folder, file, **changes):
  path = folder / file
  values = json.loads(path.read_text())
  values.update(changes)
  path.write_text(json.dumps(values))


@pytest.mark.parametrize(
  "file,changes,message",
  [
    ("config.json", dict(model_type="bart"), "config.json: model_type is 'bart', not 'marian'"),
    ("config.json", dict(normalize_before=True), "config.json: normalize_before is True"),
    ("config.json", dict(normalize_embedding=True), "config.json: normalize_embedding is True"),
    ("config.json", dict(activation_function="mish"), "config.json: activation_function 'mish'"),
    ("config.json", dict(vocab_size=50), "vocab.json: 92 pieces, but config.json's vocab_size"),
    ("config.json", dict(decoder_ffn_dim=64), "config.json: encoder_ffn_dim (32) differs"),
    ("config.json", dict(decoder_start_token_id=0), "config.json: decoder_start_token_id (0)"),
    (
      "config.json",
      dict(eos_token_id=3, forced_eos_token_id=3),
      "vocab.json: '</s>' has id 0, but",
    ),
    ("tokenizer_config.json", dict(separate_vocabs=True), "separate_vocabs is true but"),
  ],
)
def test_what_is_not_supported_is_refused_naming_file_and_field(tmp_path, file, changes, message):
  folder = _copy(tmp_path)
  _edit(folder, file, **changes)
  with pytest.raises(MarianError, match=message.replace("(", r"\(").replace(")", r"\)")):
    marian_checkpoint.read(str(folder))


def test_missing_and_inconsistent_files_are_named(tmp_path):
  folder = _copy(tmp_path)
  os.remove(folder / "target.spm")
  with pytest.raises(MarianError, match=r"target\.spm: missing"):
    marian_checkpoint.read(str(folder))
  folder = _copy(tmp_path, "odd")
  vocab = json.loads((folder / "vocab.json").read_text())
  vocab["extra"] = vocab.pop(next(iter(k for k in vocab if k not in ("</s>", "<unk>", "<pad>"))))
  vocab["extra"] = len(vocab) + 5
  (folder / "vocab.json").write_text(json.dumps(vocab))
  with pytest.raises(MarianError, match=r"vocab\.json: ids must be 0\.\.73, each once"):
    marian_checkpoint.read(str(folder))
  folder = _copy(tmp_path, "separate")
  os.remove(folder / "model.safetensors")
  with pytest.raises(MarianError, match=r"no weights \(model\.safetensors or pytorch_model\.bin\)"):
    marian_checkpoint.read(str(folder))


def test_generate_settings_without_a_tfattn_equal_are_refused(tmp_path):
  folder = _copy(tmp_path)
  _edit(folder, "generation_config.json", early_stopping=True)
  with pytest.raises(MarianError, match=r"generation_config\.json: early_stopping is true"):
    import_marian.decode_options(marian_checkpoint.read(str(folder)))
  _edit(folder, "generation_config.json", early_stopping=False, bad_words_ids=[[5, 6]])
  with pytest.raises(MarianError, match="bad_words_ids holds \\[5, 6\\]"):
    import_marian.decode_options(marian_checkpoint.read(str(folder)))


def test_generate_settings_become_decode_options():
  options = import_marian.decode_options(marian_checkpoint.read(os.path.join(FIXTURES, "shared")))
  assert (options.strategy, options.beam_size, options.alpha) == ("beam", 4, 1.0)
  assert (options.length_penalty, options.beam_stop, options.end_at_limit) == (
    "power",
    "current",
    True,
  )
  # max_length counts the decoder's start token; PAD (0) and Marian's pad (tfattn 1) banned.
  assert (options.max_decode_length, options.never_generate) == (23, "0,1")


@pytest.mark.slow
def test_the_command_refuses_in_one_line_before_tensorflow(tmp_path):
  folder = _copy(tmp_path)
  os.rename(folder / "model.safetensors", folder / "pytorch_model.bin")
  (folder / "pytorch_model.bin").write_bytes(b"not a torch file")
  run = lambda *args: subprocess.run(  # noqa: E731
    [sys.executable, "-m", "train.import_marian", *args],
    capture_output=True,
    text=True,
    timeout=120,
  )
  result = run(f"--marian_dir={tmp_path / 'nowhere'}", f"--run_dir={tmp_path / 'run'}")
  assert result.returncode == 2
  assert result.stderr.strip().splitlines() == [
    f"train.import_marian: error: {tmp_path / 'nowhere'}: not a directory (give the downloaded "
    "checkpoint's folder)"
  ]
  try:
    import torch  # noqa: F401
  except ImportError:
    result = run(f"--marian_dir={folder}", f"--run_dir={tmp_path / 'run'}")
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()[-1:]
    assert "pytorch_model.bin: reading pytorch_model.bin needs torch" in line
    assert "save_pretrained" in line
  assert not os.path.exists(tmp_path / "run")
