"""serving/tools/batch_model.py on real exports: the fda25e5 fixtures (seq2seq, classifier) and the
session's tiny export (`exported`, tests/conftest.py): output lines, n-best and sampling,
refused lines, the signature checks, and answers that do not depend on the batch."""

import json
import os

import pytest

from serving.tools import batch_files, batch_model
from serving.tools.batch_files import Line

from train_helpers import REPO

pytestmark = pytest.mark.slow  # loads real exports (and builds a few): seconds each

FIXTURES = os.path.join(REPO, "tests", "fixtures", "fda25e5")
SEQ2SEQ = os.path.join(FIXTURES, "export_seq2seq")
CLASSIFIER = os.path.join(FIXTURES, "export_classification")


def _lines(texts, file_index=0):
  return [Line(file_index, i + 1, text, "", f"f:{i + 1}") for i, text in enumerate(texts)]


def _texts(path, column):
  with open(path, encoding="utf-8") as f:
    return [line.rstrip("\n").split("\t")[column] for line in f][:24]


def test_an_export_base_path_resolves_to_its_newest_version(tmp_path):
  assert batch_model.resolve_export(SEQ2SEQ) == os.path.join(SEQ2SEQ, "1")
  assert batch_model.resolve_export(os.path.join(SEQ2SEQ, "1")) == os.path.join(SEQ2SEQ, "1")
  with pytest.raises(ValueError, match="does not exist"):
    batch_model.resolve_export(str(tmp_path / "nothing"))
  with pytest.raises(ValueError, match="holds no SavedModel"):
    batch_model.resolve_export(str(tmp_path))


def test_answers_do_not_depend_on_batch_order_or_size():
  model = batch_model.BatchModel(os.path.join(SEQ2SEQ, "1"), "serving_default", batch_model.TEXT)
  window = _lines(_texts(os.path.join(FIXTURES, "seq2seq.tsv"), 0))
  sorted_answers = batch_model.run_window(model, window, batch_size=5, sort=True)
  in_order = batch_model.run_window(model, window, batch_size=24, sort=False)
  one_by_one = [model.predict([line])[0] for line in window]
  assert [answer[0] for answer in sorted_answers] == window  # back in the window's order
  assert [a[1] for a in sorted_answers] == [a[1] for a in in_order] == [a[1] for a in one_by_one]
  assert all(output and "\n" not in output for _, output, _ in sorted_answers)


def test_windows_are_sorted_by_the_exports_own_token_counts():
  import tensorflow as tf
  import tensorflow_text

  path = os.path.join(SEQ2SEQ, "1")
  model = batch_model.BatchModel(path, "serving_default", batch_model.TEXT)
  # Digit lines (a token a character) and words this vocabulary lacks (one token a word).
  texts = [*_texts(os.path.join(FIXTURES, "seq2seq.tsv"), 0)[:12], "abcdefghijkl", "hello world"]
  window = _lines(texts)
  with open(os.path.join(path, "assets", "source.model"), "rb") as f:
    pieces = tensorflow_text.SentencepieceTokenizer(model=f.read(), out_type=tf.int32)
  expected = [len(row) for row in pieces.tokenize(texts).to_list()]
  assert model.token_lengths(window) == expected
  by_characters = [expected[i] for i in sorted(range(len(texts)), key=lambda i: len(texts[i]))]
  assert by_characters != sorted(expected)  # so the order below tells tokens from characters
  calls = []
  predict = model.predict
  model.predict = lambda batch: calls.append(batch) or predict(batch)
  batch_model.run_window(model, window, batch_size=5, sort=True)
  tokens = dict(zip((line.number for line in window), expected))
  assert [tokens[line.number] for batch in calls for line in batch] == sorted(expected)


def test_a_classifier_writes_labels_or_every_output_as_json():
  path = os.path.join(CLASSIFIER, "1")
  window = _lines(_texts(os.path.join(FIXTURES, "classification.tsv"), 0)[:6])
  labels = batch_model.BatchModel(path, "serving_default", batch_model.TEXT)
  records = batch_model.BatchModel(path, "serving_default", batch_model.JSONL)
  assert labels.main_output == "label"
  text_lines = [output for _, output, _ in labels.predict(window)]
  json_lines = [output for _, output, _ in records.predict(window)]
  for text, line in zip(text_lines, json_lines):
    record = json.loads(line)
    assert set(record) == {"label", "probabilities"}
    assert text == str(record["label"]) == records.main_text(line)
    assert record["probabilities"][record["label"]] == max(record["probabilities"])
    assert sum(record["probabilities"]) == pytest.approx(1.0, abs=1e-4)


def test_signatures_that_do_not_take_text_are_refused_by_name(exported):
  _, path = exported
  with pytest.raises(ValueError, match=r"no signature 'nope'.*serving_default"):
    batch_model.BatchModel(path, "nope", batch_model.TEXT)
  with pytest.raises(ValueError, match="'score' does not take text lines"):
    batch_model.BatchModel(path, "score", batch_model.TEXT)


def test_nbest_writes_every_beam_best_first(exported):
  _, path = exported
  window = _lines(["4213", "17", "700005"])
  nbest = batch_model.BatchModel(path, "translate_nbest", batch_model.JSONL)
  best = batch_model.BatchModel(path, "translate_nbest", batch_model.TEXT)
  for (_, line, _), (_, text, _) in zip(nbest.predict(window), best.predict(window)):
    record = json.loads(line)
    beams = record["translation"]
    assert isinstance(beams, list) and len(beams) == len(record["score"]) > 1
    assert record["score"] == sorted(record["score"], reverse=True)
    assert text.split("\t") == [" ".join(beam.split()) for beam in beams]
    assert nbest.main_text(line) == beams[0]


def test_a_line_the_export_refuses_is_named_and_its_batch_mates_answered(exported):
  _, path = exported
  model = batch_model.BatchModel(path, "serving_default", batch_model.TEXT)
  # A text carrying a byte that is not UTF-8 (kept by surrogateescape) reaches the export,
  # which refuses it: only that line gets the error.
  window = _lines(["4213", "17\udcff", "19"])
  answers = model.predict(window)
  assert [output is None for _, output, _ in answers] == [False, True, False]
  assert answers[1][2].startswith("refused by the export: ")
  assert answers[0][1] == model.predict(window[:1])[0][1]


def test_a_batch_refused_while_each_line_answers_alone_is_the_models_error(tmp_path):
  """A model whose answer depends on the batch (this one reads a table of one row by the
  row's index, as a finished row read past the position table) must not be hidden by the
  line-by-line retry: before, every line was answered and the error was only logged."""
  import tensorflow as tf

  class OneRowAtATime(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
    def serve(self, text):
      rows = tf.gather(tf.constant(["x"]), tf.range(tf.size(text)))  # row 1 is out of range
      return {"translation": tf.strings.join([text, rows])}

  module = OneRowAtATime()
  path = str(tmp_path / "1")
  tf.saved_model.save(module, path, signatures={"serving_default": module.serve})
  model = batch_model.BatchModel(path, "serving_default", batch_model.TEXT)
  window = _lines(["a", "b", "c"])
  assert model.predict(window[:1]) == [(window[0], "ax", "")]
  with pytest.raises(batch_model.ModelError, match=r"refused a batch of 3 lines \(f:1 to f:3\)"):
    batch_model.run_window(model, window, batch_size=3, sort=False)


@pytest.fixture(scope="module")
def sampling_export(trained_run, tmp_path_factory):
  from serving import export
  from tfattn.decode_options import DecodeOptions

  base = tmp_path_factory.mktemp("sampled")
  return export.export(
    str(trained_run), str(base), options=DecodeOptions(strategy="sample", top_k=5)
  )


def test_sample_draws_each_line_with_its_own_seed_in_any_batch(sampling_export):
  model = batch_model.BatchModel(sampling_export, "sample", batch_model.JSONL, seed=11)
  assert model.takes_seed
  window = _lines(["4213"] * 6 + ["17"] * 2)
  together = [output for _, output, _ in model.predict(window)]
  alone = [model.predict([line])[0][1] for line in window]
  main = [json.loads(line)["translation"] for line in together]
  assert main == [json.loads(line)["translation"] for line in alone]
  assert len(set(main[:6])) > 1  # six seeds for one text: not one answer repeated
  other_file = [output for _, output, _ in model.predict(_lines(["4213"] * 6, file_index=1))]
  assert other_file != together[:6]


def test_a_skipped_line_leaves_a_line_in_its_place():
  line = Line(0, 3, None, "not valid UTF-8 (byte 1)", "in.txt:3")
  assert batch_model.bad_line_output(line, line.error, batch_model.TEXT) == ""
  record = json.loads(batch_model.bad_line_output(line, line.error, batch_model.JSONL))
  assert record == {"error": "in.txt:3: not valid UTF-8 (byte 1)"}
  assert batch_files.chunk_bytes(["a", ""]) == b"a\n\n"


def test_a_language_model_continues_each_line_with_generate(tmp_path):
  """A tiny untrained language model export (saved here): `generate` and `generate_nbest`."""
  import tensorflow as tf

  import tfattn
  from serving.export.modules import LanguageModelExport
  from tfattn import text as tfattn_text
  from tfattn.decode_options import DecodeOptions
  from tfattn.language_model import LanguageModel
  from train import tokenizer as vocabulary

  words = tf.data.Dataset.from_tensor_slices(["red green blue cat dog fish sun moon"] * 20)
  path = vocabulary.learn_and_write(vocabulary.SENTENCEPIECE, words, 40, str(tmp_path / "vocab"))
  tok = tfattn_text.load_tokenizer(path)
  config = tfattn.TransformerConfig.preset(
    "tiny", source_vocab_size=tok.vocab_size, target_vocab_size=tok.vocab_size, max_length=16
  )
  module = LanguageModelExport(
    LanguageModel(config), tok, DecodeOptions(strategy="beam", beam_size=2, max_decode_length=4)
  )
  export_dir = str(tmp_path / "lm" / "1")
  tf.saved_model.save(module, export_dir, signatures=module.signatures())
  window = _lines(["red cat", "", "blue sun moon"])
  generate = batch_model.BatchModel(export_dir, "generate", batch_model.JSONL)
  assert generate.main_output == "generation"
  records = [json.loads(output) for _, output, _ in generate.predict(window)]
  assert [set(record) for record in records] == [{"generation", "score", "log_prob"}] * 3
  nbest = batch_model.BatchModel(
    batch_model.resolve_export(str(tmp_path / "lm")), "generate_nbest", batch_model.TEXT
  )
  beams = [output.split("\t") for _, output, _ in nbest.predict(window)]
  assert [len(row) for row in beams] == [2, 2, 2]
  assert [row[0] for row in beams] == [" ".join(r["generation"].split()) for r in records]
