"""An export's answer for a row never depends on the other rows of its batch (issue 49): for every
export kind (seq2seq graph and XLA, classifier, language model graph and XLA, sampling exports, a
windowed language model; greedy, beam and sampling searches) and every signature, each row of
random batches (empty and maximum-length rows among them) gets the answer it gets alone: the
same ids and texts, floats within float32 tolerance, outputs padded past the row's own length
holding padding only.

Tiny untrained models over a byte vocabulary (no vocabulary to learn, one token a byte), the
export modules called in this process (the functions a SavedModel of them holds). Every batch
holds `BATCH` rows, drawn with replacement, so an XLA export compiles two programs a search (one
row, `BATCH` rows) and one length bucket (max_length <= the smallest bucket)."""

import numpy as np
import pytest
import tensorflow as tf

import tfattn
from serving.export import modules
from tfattn import text as tfattn_text
from tfattn.decode_options import DecodeOptions
from tfattn.language_model import LanguageModel

pytestmark = pytest.mark.slow  # traces every signature of six exports, compiles two with XLA

MAX_LENGTH = 12  # tokens (bytes): one XLA length bucket
BATCH, DRAWS = 4, 3  # rows a batch; random batches a signature
ATOL = 1e-4  # float32 sums over other padded widths
DTYPES = {"text": tf.string, "target": tf.string, "seed": tf.int64}
# Outputs computed for padding positions too (not zeroed): compared within the row only.
PADDING_OWN = {"encoding"}

TEXTS = ["", "a", "the cat", "0123456789ab", "x" * (MAX_LENGTH + 5)]  # empty, ..., max, cut
PROMPTS = ["", "a", "the cat", "0123456789a"]  # a language model reads max_length - 1 pieces
IDS = [[], [7], [40, 41, 42, 43], [9] * MAX_LENGTH]
PAIRS = [
  ([], [2]),
  ([5, 6], [7, 8, 2]),
  ([9] * MAX_LENGTH, [10] * (MAX_LENGTH - 1) + [2]),
  ([4], []),
]


def _rows(signature):
  """The rows (one dict of inputs each) that check a signature, by its name."""
  texts = [{"text": text} for text in TEXTS]
  prompts = [{"text": text} for text in PROMPTS]
  layers = [0, -1, 0, -1, 0]  # one layer and every layer, mixed in a batch
  return {
    "serving_default": texts,
    "translate_nbest": texts,
    "generate": prompts,
    "generate_nbest": prompts,
    "translate_ids": [{"source_ids": ids} for ids in IDS],
    "classify_ids": [{"source_ids": ids} for ids in IDS],
    "generate_ids": [{"source_ids": ids[: MAX_LENGTH - 1]} for ids in IDS],
    "encode": [{"source_ids": ids} for ids in IDS],
    "score": [{"source_ids": s, "target_ids": t} for s, t in PAIRS],
    "score_text": prompts,
    "sample": [{"text": t, "seed": 11 * i} for i, t in enumerate(TEXTS)],
    "sample_up_to": [
      {"text": t, "seed": 5 * i, "max_new_tokens": n}
      for i, (t, n) in enumerate(zip(PROMPTS, [MAX_LENGTH, 1, 3, 100]))
    ],
    "generate_up_to": [
      {"text": t, "max_new_tokens": n} for t, n in zip(PROMPTS, [MAX_LENGTH, 2, 1, 100])
    ],
    "attention": [
      {"text": t, "target": target, "layer": layer}
      for t, target, layer in zip(TEXTS, ["", "abc", "", "x" * 20, "q"], layers)
    ],
    # Every target the model's own translation: an XLA export then decodes whole batches (a
    # mix would decode sub-batches of every size, each size a program to compile).
    "attention_own": [{"text": t, "target": "", "layer": layer} for t, layer in zip(TEXTS, layers)],
    "attention_text": [{"text": t, "layer": layer} for t, layer in zip(TEXTS, layers)],
  }[signature]


def _batch(rows):
  """[{input: value}] -> {input: tensor}: values stacked, id lists padded with 0 to the longest."""
  batch = {}
  for name in rows[0]:
    values = [row[name] for row in rows]
    if isinstance(values[0], list):
      width = max(len(v) for v in values)
      padded = [v + [0] * (width - len(v)) for v in values]
      batch[name] = tf.constant(padded, tf.int32, shape=[len(values), width])
    else:
      batch[name] = tf.constant(values, DTYPES.get(name, tf.int32))
  return batch


def _assert_as_alone(name, batched, alone, where):
  """A row's output in a batch: its answer alone, then (past the row's own shape) padding."""
  batched, alone = np.asarray(batched), np.asarray(alone)
  assert batched.ndim == alone.ndim and all(b >= a for b, a in zip(batched.shape, alone.shape)), (
    name,
    where,
    batched.shape,
    alone.shape,
  )
  inside = tuple(slice(0, n) for n in alone.shape)
  if alone.dtype.kind == "f":
    np.testing.assert_allclose(batched[inside], alone, atol=ATOL, err_msg=f"{name} {where}")
  else:
    np.testing.assert_array_equal(batched[inside], alone, err_msg=f"{name} {where}")
  if name not in PADDING_OWN and batched.shape != alone.shape:
    rest = batched.copy()
    rest[inside] = b"" if batched.dtype.kind in "SO" else 0
    assert not rest.astype(bool).any(), (name, where, "past the row", batched)


def _check_signature(function, rows, seed):
  """Each row's answer alone, then `DRAWS` batches of `BATCH` rows drawn with replacement (the
  first: the first `BATCH` rows, shuffled), each row of each batch against its answer alone."""
  alone = [{k: v.numpy()[0] for k, v in function(**_batch([row])).items()} for row in rows]
  rng = np.random.default_rng(seed)
  draws = [rng.permutation(BATCH)] + [rng.choice(len(rows), BATCH) for _ in range(DRAWS - 1)]
  for picks in draws:
    answers = function(**_batch([rows[i] for i in picks]))
    for place, i in enumerate(picks):
      for name, value in answers.items():
        _assert_as_alone(name, value.numpy()[place], alone[i][name], f"row {i} of {list(picks)}")


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
  path = tmp_path_factory.mktemp("vocab") / f"source{tfattn_text.BYTE_SUFFIX}"
  path.write_text("\n".join(tfattn_text.byte_vocabulary()) + "\n", encoding="utf-8")
  return tfattn_text.load_tokenizer(str(path))


def _config(seed, **changes):
  sizes = dict(
    source_vocab_size=260,
    target_vocab_size=260,
    max_length=MAX_LENGTH,
    d_model=16,
    dff=32,
    num_heads=2,
    num_encoder_layers=2,  # two layers somewhere: a row asks one layer, another every layer
    num_decoder_layers=1,
    seed=seed,
  )
  return tfattn.TransformerConfig.preset("tiny", **{**sizes, **changes})


BEAM = DecodeOptions(strategy="beam", beam_size=2)
GREEDY = DecodeOptions(strategy="greedy")
SAMPLE = DecodeOptions(strategy="sample", top_k=20, seed=3)

# (kind, decode, options, model changes): every export kind, its decode modes, sampling, window.
# The classifier pools the first position (an empty text alone has none: it failed alone).
# A beam XLA export compiles one search less (its best is the n-best's first beam).
EXPORTS = {
  "seq2seq_graph_sample": ("seq2seq", "graph", SAMPLE, {}),
  "seq2seq_xla_beam": ("seq2seq", "xla", BEAM, {"position_encoding": "learned"}),
  "classifier": ("classifier", None, None, {"pooling": "first", "num_classes": 3}),
  "language_model_graph_greedy": ("language_model", "graph", GREEDY, {"num_decoder_layers": 2}),
  "language_model_xla_beam": ("language_model", "xla", BEAM, {"position_encoding": "learned"}),
  "windowed_language_model_sample": ("language_model", "graph", SAMPLE, {"attention_window": 2}),
}


def _export(name, tokenizer):
  kind, decode, options, changes = EXPORTS[name]
  config = _config(seed=len(name), **changes)
  if kind == "seq2seq":
    return modules.Seq2SeqExport(tfattn.Transformer(config), tokenizer, tokenizer, options, decode)
  if kind == "classifier":
    return modules.ClassifierExport(tfattn.EncoderClassifier(config), tokenizer)
  return modules.LanguageModelExport(LanguageModel(config), tokenizer, options, decode)


@pytest.mark.parametrize("name", sorted(EXPORTS))
def test_every_signature_answers_a_row_in_any_batch_as_alone(tokenizer, name):
  module = _export(name, tokenizer)
  signatures = module.signatures()
  # The whole list: a signature added to a kind must be given rows here.
  assert set(signatures) >= {"serving_default", "attention"}
  for index, (signature, function) in enumerate(sorted(signatures.items())):
    rows_of = signature
    if EXPORTS[name][0] == "language_model" and signature in ("serving_default", "score"):
      rows_of = {"serving_default": "generate", "score": "score_text"}[signature]
    if signature == "attention" and EXPORTS[name][0] != "seq2seq":
      rows_of = "attention_text"
    elif signature == "attention" and EXPORTS[name][1] == "xla":
      rows_of = "attention_own"
    _check_signature(function, _rows(rows_of), seed=index)


def test_max_new_tokens_is_checked_and_capped_by_the_models_limit(tokenizer):
  module = _export("language_model_graph_greedy", tokenizer)
  text = tf.constant(["a", ""])
  for lengths, message in (([0, 3], "at least 1"), ([3], "one int32 per text")):
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
      module.generate_up_to(text, tf.constant(lengths))
  capped = module.generate_up_to(text, tf.constant([1000, 1000]))
  at_limit = module.generate_up_to(text, tf.constant([MAX_LENGTH, MAX_LENGTH]))
  np.testing.assert_array_equal(capped["generation"], at_limit["generation"])
  np.testing.assert_allclose(capped["log_prob"], at_limit["log_prob"], atol=1e-6)
