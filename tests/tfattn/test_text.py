"""tfattn.text: in-graph tokenizers (SentencePiece lossless, WordPiece) and their learning."""

import unicodedata

import pytest
import tensorflow as tf

from tfattn import text
from train import tokenizer

# Portuguese and German accents, CJK, emoji, digits, punctuation, repeated and edge spaces.
MULTILINGUAL = [
  "Olá, coração! A ação começa às 9h30 em São Paulo.",
  "Größe über Straße: Äpfel, Öl & Übermut?",
  "東京は日本の首都です。北京欢迎你！",
  "I ❤️ emoji 🚀🎉 — really!",
  "12345 + 0.5 = 12345.5; 3/4 (75%)",
  "Hello,  World!   Two  spaces  kept.",
  "  leading and trailing  ",
  "THE CAT sat on the Mat.",
  "ﬁ ligature and full-width ＡＢＣ１２３ (NFKC changes these)",
]


def _learn(tmp_path, kind, texts, vocab_size, lower_case=False):
  dataset = tf.data.Dataset.from_tensor_slices(texts)
  return text.load_tokenizer(
    tokenizer.learn_and_write(kind, dataset, vocab_size, str(tmp_path / "vocab"), lower_case)
  )


@pytest.fixture(scope="module")
def sentencepiece(tmp_path_factory):
  # Only half of the sample is in the training text: the rest needs byte fallback.
  return _learn(
    tmp_path_factory.mktemp("sp"), tokenizer.SENTENCEPIECE, MULTILINGUAL[::2] * 50, vocab_size=600
  )


def test_sentencepiece_round_trip_is_lossless_up_to_nfkc(sentencepiece):
  ids = sentencepiece.tokenize(MULTILINGUAL)
  assert ids.dtype == tf.int32
  assert int(tf.reduce_min(ids.flat_values)) > text.END_ID  # no PAD/START/END inside text
  restored = [s.decode() for s in sentencepiece.detokenize(ids.to_tensor()).numpy()]
  assert restored == [unicodedata.normalize("NFKC", s) for s in MULTILINGUAL]
  assert text.UNK_ID not in ids.flat_values.numpy()  # byte fallback, never [UNK]


def test_detokenize_stops_at_end_and_drops_padding(sentencepiece):
  ids = sentencepiece.tokenize(["Hello, World!"]).to_tensor()
  framed = tf.concat([[[text.START_ID]], ids, [[text.END_ID]], ids, [[text.PAD_ID] * 3]], 1)
  assert sentencepiece.detokenize(framed).numpy()[0].decode() == "Hello, World!"


def test_sentencepiece_lower_case_folds_case(tmp_path):
  tok = _learn(tmp_path, tokenizer.SENTENCEPIECE, MULTILINGUAL * 20, 600, lower_case=True)
  restored = tok.detokenize(tok.tokenize(["THE CAT, Größe"]).to_tensor()).numpy()[0]
  assert restored.decode() == "the cat, größe"


def test_sentencepiece_small_vocabulary_on_tiny_text(tmp_path):
  # Fewer distinct pieces than asked for: the vocabulary comes out smaller, no error.
  tok = _learn(tmp_path, tokenizer.SENTENCEPIECE, ["1 2 3", "4 5 6 7 8 9 0"] * 20, 1000)
  assert text.END_ID < tok.vocab_size < 1000
  ids = tok.tokenize(["907"])
  assert ids.row_lengths().numpy().tolist() == [3]  # digits are split
  assert tok.detokenize(ids.to_tensor()).numpy()[0] == b"907"


@pytest.mark.slow
def test_wordpiece_is_selectable_and_case_folds(tmp_path):
  corpus = ["Olá, mundo! Ça va très bien.", "Привет, мир — 2024 год.", "naïve café"] * 20
  tok = _learn(tmp_path, tokenizer.WORDPIECE, corpus, 200)
  assert isinstance(tok, text.WordPieceTokenizer)
  restored = tok.detokenize(tok.tokenize(corpus[:2]).to_tensor()).numpy()
  assert restored[1].decode() == "привет , мир — 2 0 2 4 год ."
  unknown = tok.tokenize(["naïve zzz"]).to_tensor()
  assert tok.detokenize(unknown).numpy()[0].decode() == "naïve [UNK]"


def test_vocabularies_must_start_with_the_reserved_tokens(tmp_path, sentencepiece):
  bad = tmp_path / "bad.txt"
  bad.write_text("a\nb\n")
  with pytest.raises(ValueError, match="must start with"):
    text.load_tokenizer(str(bad))
  import io

  import sentencepiece as spm

  model = io.BytesIO()
  spm.SentencePieceTrainer.train(
    sentence_iterator=iter(MULTILINGUAL * 20),
    model_writer=model,
    vocab_size=100,
    hard_vocab_limit=False,
    minloglevel=2,
  )
  default_ids = tmp_path / "default.model"
  default_ids.write_bytes(model.getvalue())
  with pytest.raises(ValueError, match=r"ids 0\.\.3 must be"):
    text.load_tokenizer(str(default_ids))


def test_tokenizer_path_finds_either_kind(tmp_path):
  (tmp_path / "source.model").write_bytes(b"")
  (tmp_path / "target.txt").write_text("")
  assert text.tokenizer_path(str(tmp_path), "source").endswith("source.model")
  assert text.tokenizer_path(str(tmp_path), "target").endswith("target.txt")
  with pytest.raises(ValueError, match="holds no other vocabulary"):
    text.tokenizer_path(str(tmp_path), "other")


def test_truncate_tokens_keeps_the_chosen_end():
  ragged = tf.ragged.constant([[1, 2, 3, 4, 5], [6, 7]])
  assert text.truncate_tokens(ragged, 3, "right").to_list() == [[1, 2, 3], [6, 7]]
  assert text.truncate_tokens(ragged, 3, "left").to_list() == [[3, 4, 5], [6, 7]]


def test_tokenizers_save_and_load_in_a_saved_model(tmp_path, sentencepiece):
  module = tf.Module()
  module.tokenizer = sentencepiece
  module.round_trip = tf.function(
    lambda s: sentencepiece.detokenize(sentencepiece.tokenize(s).to_tensor()),
    input_signature=[tf.TensorSpec([None], tf.string)],
  )
  tf.saved_model.save(module, str(tmp_path / "saved"))
  loaded = tf.saved_model.load(str(tmp_path / "saved"))
  assert loaded.round_trip(tf.constant(MULTILINGUAL[:3])).numpy().tolist() == [
    unicodedata.normalize("NFKC", s).encode() for s in MULTILINGUAL[:3]
  ]


def test_two_sentencepiece_models_in_one_saved_model_stay_apart(tmp_path, sentencepiece):
  """Regression: TF-Text's unnamed resources made a restored source and target tokenizer
  share one model."""
  other = _learn(tmp_path, tokenizer.SENTENCEPIECE, ["zz yy xx ww vv uu"] * 50, 600)
  module = tf.Module()
  module.source, module.target = sentencepiece, other
  module.both = tf.function(
    lambda s: (sentencepiece.tokenize(s).to_tensor(), other.tokenize(s).to_tensor()),
    input_signature=[tf.TensorSpec([None], tf.string)],
  )
  sample = tf.constant(["Hello, World!"])
  expected = [ids.numpy().tolist() for ids in module.both(sample)]
  assert expected[0] != expected[1]
  tf.saved_model.save(module, str(tmp_path / "saved"))
  loaded = tf.saved_model.load(str(tmp_path / "saved"))
  assert [ids.numpy().tolist() for ids in loaded.both(sample)] == expected


def test_the_tf_text_resource_patch_still_takes_hold(tmp_path, sentencepiece):
  """tfattn/text.py replaces TF-Text's private `SentencepieceTokenizer._model_resource` with a
  named resource. A TF-Text upgrade that renames or stops reading that attribute would leave the
  patch silently dead: this fails then. A fresh TF-Text tokenizer has the attribute; after the
  patch, tokenizing reads our resource (a resource of another model changes the ids)."""
  import tensorflow_text

  with open(sentencepiece.model_file.asset_path.numpy(), "rb") as f:
    model = f.read()
  fresh = tensorflow_text.SentencepieceTokenizer(model=model, out_type=tf.int32)
  assert isinstance(fresh._model_resource, tf.saved_model.experimental.TrackableResource)
  assert isinstance(sentencepiece._sentencepiece._model_resource, text._SentencePieceModel)
  other = _learn(tmp_path, tokenizer.SENTENCEPIECE, ["zz yy xx ww vv uu"] * 50, 600)
  with open(other.model_file.asset_path.numpy(), "rb") as f:
    other_model = f.read()
  sample = tf.constant(["Hello, World! zz yy"])
  mine = fresh.tokenize(sample).to_list()
  fresh._model_resource = text._SentencePieceModel(other_model)
  assert fresh.tokenize(sample).to_list() == other.tokenize(sample).to_list() != mine
