"""tfattn.text: in-graph tokenizers (SentencePiece lossless, WordPiece, characters, bytes) and
their learning."""

import random
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


def test_tokenizer_path_finds_every_kind(tmp_path):
  for side, suffix in (("source", ".model"), ("target", ".txt"), ("a", ".chars"), ("b", ".bytes")):
    (tmp_path / (side + suffix)).write_bytes(b"")
    assert text.tokenizer_path(str(tmp_path), side).endswith(side + suffix)
  with pytest.raises(ValueError, match="holds no other vocabulary"):
    text.tokenizer_path(str(tmp_path), "other")


def test_truncate_tokens_keeps_the_chosen_end():
  ragged = tf.ragged.constant([[1, 2, 3, 4, 5], [6, 7]])
  assert text.truncate_tokens(ragged, 3, "right").to_list() == [[1, 2, 3], [6, 7]]
  assert text.truncate_tokens(ragged, 3, "left").to_list() == [[3, 4, 5], [6, 7]]


@pytest.mark.parametrize("kind", ["sentencepiece", "char", "byte"])
def test_tokenizers_save_and_load_in_a_saved_model(tmp_path, sentencepiece, kind):
  if kind == "sentencepiece":
    tok, expected = sentencepiece, [unicodedata.normalize("NFKC", s) for s in MULTILINGUAL[:3]]
  else:
    tok, expected = _learn(tmp_path, kind, MULTILINGUAL, 1000), MULTILINGUAL[:3]
  module = tf.Module()
  module.tokenizer = tok
  module.round_trip = tf.function(
    lambda s: tok.detokenize(tok.tokenize(s).to_tensor()),
    input_signature=[tf.TensorSpec([None], tf.string)],
    autograph=False,
  )
  tf.saved_model.save(module, str(tmp_path / "saved"))
  loaded = tf.saved_model.load(str(tmp_path / "saved"))
  restored = loaded.round_trip(tf.constant(MULTILINGUAL[:3])).numpy().tolist()
  assert restored == [s.encode() for s in expected]
  if kind != "sentencepiece":  # TF core only: TF Serving runs them without TF-Text
    from serving.export import check

    assert set(check.saved_model_ops(str(tmp_path / "saved"))) <= check.core_ops()


def test_two_sentencepiece_models_in_one_saved_model_stay_apart(tmp_path, sentencepiece):
  """Regression: TF-Text's unnamed resources made a restored source and target tokenizer
  share one model."""
  other = _learn(tmp_path, tokenizer.SENTENCEPIECE, ["zz yy xx ww vv uu"] * 50, 600)
  module = tf.Module()
  module.source, module.target = sentencepiece, other
  module.both = tf.function(
    lambda s: (sentencepiece.tokenize(s).to_tensor(), other.tokenize(s).to_tensor()),
    input_signature=[tf.TensorSpec([None], tf.string)],
    autograph=False,
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


# Text a normalizing tokenizer would change: newlines of three kinds, tabs, NUL, a combining
# accent beside a precomposed one, a ligature, full-width letters, emoji with a joiner and a
# variation selector, CJK, right-to-left script, a character outside the BMP, a leading
# byte-order mark and noncharacters (a transcoder may drop or replace them).
EXACT = [
  "\ufeffline one\nline two\r\nline three\rend\n\u2028\u0085",
  "\uffff\ufffe\U0010ffff",
  "\ttab\x00nul  two spaces ",
  "e\u0301 vs \u00e9; \ufb01 ligature; \uff21\uff22\uff23\uff11",
  "\U0001f469\u200d\U0001f4bb \u2764\ufe0f \U0001f680",
  "\u6771\u4eac \u05e9\u05dc\u05d5\u05dd \U00010348",
  "",
  "\n",
]


def _random_text(rng, length):
  """Any Unicode scalar values (no surrogates), newlines and spaces included."""
  characters = []
  while len(characters) < length:
    code_point = rng.choice([rng.randrange(0, 0x80), rng.randrange(0x80, 0x110000), 10, 32])
    if not 0xD800 <= code_point < 0xE000:
      characters.append(chr(code_point))
  return "".join(characters)


def _round_trip(tok, texts):
  ids = tok.tokenize(tf.constant(texts))
  assert ids.dtype == tf.int32
  return [s.decode("utf-8") for s in tok.detokenize(ids.to_tensor()).numpy()], ids


@pytest.fixture(scope="module")
def random_texts():
  rng = random.Random(7)
  return [_random_text(rng, rng.randrange(0, 40)) for _ in range(50)]


def test_characters_round_trip_exactly(tmp_path, random_texts):
  texts = EXACT + random_texts
  tok = _learn(tmp_path, tokenizer.CHARACTER, texts, 10_000)
  assert isinstance(tok, text.CharacterTokenizer)
  assert tok.vocab_size == len(text.RESERVED_TOKENS) + len(set("".join(texts)))
  restored, ids = _round_trip(tok, texts)
  assert restored == texts
  assert ids.row_lengths().numpy().tolist() == [len(t) for t in texts]  # one id a character
  assert int(tf.reduce_min(ids.flat_values)) > text.UNK_ID


def test_unseen_characters_are_unk_and_come_back_as_the_replacement_character(tmp_path):
  tok = _learn(tmp_path, tokenizer.CHARACTER, ["abc\n"], 100)
  ids = tok.tokenize(tf.constant(["a\nZb\U0001f680", b"a\xffb"]))
  assert ids.to_list() == [[5, 4, 3, 6, 3], [5, 3, 6]]  # ids in code point order: \n a b c
  assert [s.decode() for s in tok.detokenize(ids.to_tensor()).numpy()] == [
    "a\n\ufffdb\ufffd",
    "a\ufffdb",
  ]


def test_bytes_round_trip_any_text_without_unk(tmp_path, random_texts):
  tok = _learn(tmp_path, tokenizer.BYTE, ["not read"], 10)
  assert isinstance(tok, text.ByteTokenizer) and tok.vocab_size == 260
  texts = EXACT + random_texts
  restored, ids = _round_trip(tok, texts)
  assert restored == texts
  assert ids.row_lengths().numpy().tolist() == [len(t.encode()) for t in texts]
  assert ids.to_list()[0][:7] == [4 + b for b in "\ufeffline".encode()]
  assert int(tf.reduce_min(ids.flat_values)) > text.UNK_ID


def test_bytes_a_model_writes_always_detokenize_to_valid_utf8(tmp_path):
  tok = _learn(tmp_path, tokenizer.BYTE, [], 10)
  half_a_character = [4 + b for b in "é".encode()[:1]]
  ids = tf.constant([[4 + ord("a"), *half_a_character, text.UNK_ID, 4 + ord("b"), text.END_ID, 9]])
  assert tok.detokenize(ids).numpy()[0].decode("utf-8") == "a\ufffd\ufffdb"


@pytest.mark.parametrize("kind", [tokenizer.CHARACTER, tokenizer.BYTE])
def test_character_and_byte_tokenizers_run_inside_graphs(tmp_path, kind):
  tok = _learn(tmp_path, kind, EXACT, 1000)
  dataset = tf.data.Dataset.from_tensor_slices(EXACT).batch(3).map(tok.tokenize)
  expected = tok.tokenize(tf.constant(EXACT)).to_list()
  assert [row for batch in dataset for row in batch.to_list()] == expected

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
  def round_trip(strings):
    return tok.detokenize(tok.tokenize(strings).to_tensor())

  assert [s.decode() for s in round_trip(tf.constant(EXACT)).numpy()] == EXACT


def test_character_and_byte_vocabulary_files_are_checked(tmp_path):
  reserved = "\n".join(text.RESERVED_TOKENS) + "\n"
  for name, body, problem in (
    ("unsorted.chars", reserved + "U+0062\nU+0061\n", "ascending"),
    ("empty.chars", reserved, "one U"),
    ("letters.chars", reserved + "a\n", "one U"),
    ("unreserved.chars", "U+0061\n", "must start with"),
    ("short.bytes", reserved + "0x00\n", "0x00 .. 0xFF"),
    ("vocab.unknown", reserved, "not a vocabulary file"),
  ):
    (tmp_path / name).write_text(body, encoding="utf-8")
    with pytest.raises(ValueError, match=problem):
      text.load_tokenizer(str(tmp_path / name))
