"""train/language_model_data.py: the language model's packed blocks lose no token, are exact,
pad only the last block, number documents, resume exactly; the line mode reports its cuts."""

import numpy as np
import pytest
import tensorflow as tf

from tfattn import text
from tfattn.special_ids import END_ID, PAD_ID, START_ID
from train import language_model_data, streams, tokenizer

# Two files, each one document whose newlines are text (a blank line too).
FILES = {"a.txt": "the cat sees the dog\n\nand the dog runs away\n", "b.txt": "a bird sings\n"}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
  folder = tmp_path_factory.mktemp("text")
  for name, content in FILES.items():
    (folder / name).write_text(content, encoding="utf-8")
  return [str(folder / name) for name in FILES]


@pytest.fixture(scope="module")
def sentencepiece(files, tmp_path_factory):
  """A vocabulary learned from the pieces the files stream as (as a run learns it)."""
  pieces = streams.text_pieces(files, document_per_line=False).map(lambda text, _: text)
  path = tmp_path_factory.mktemp("vocab") / "source.model"
  path.write_bytes(tokenizer.learn_sentencepiece(pieces.repeat(20), 40))
  return text.load_tokenizer(str(path))


def _pieces(files):
  return streams.text_pieces(files, document_per_line=False)


def _document_tokens(files, sentencepiece):
  """Each file's tokens, its pieces tokenized one by one."""
  documents, current = [], []
  for piece, ends in _pieces(files).as_numpy_iterator():
    current += [int(t) for t in sentencepiece.tokenize(tf.constant([piece]))[0].numpy()]
    if ends:
      documents.append(current)
      current = []
  return documents


@pytest.mark.parametrize("block_length", [5, 64])
def test_blocks_hold_every_token_once_and_pad_only_the_last(files, sentencepiece, block_length):
  documents = _document_tokens(files, sentencepiece)
  stream_targets = [t for tokens in documents for t in [*tokens, END_ID]]
  stream_inputs = [t for tokens in documents for t in [START_ID, *tokens]]
  stream_segments = [i + 1 for i, tokens in enumerate(documents) for _ in range(len(tokens) + 1)]
  batches = list(
    language_model_data.packed_dataset(
      _pieces(files), sentencepiece, batch_size=3, max_length=block_length, segments=True
    ).as_numpy_iterator()
  )
  rows = {name: np.concatenate([b[name] for b in batches]) for name in batches[0]}
  assert set(rows) == {"inputs", "targets", "segment_ids"}
  assert all(value.shape[1] == block_length for value in rows.values())
  count = len(stream_targets)
  assert rows["targets"].shape[0] == -(-count // block_length)  # no block dropped
  flat = {name: value.reshape(-1) for name, value in rows.items()}
  np.testing.assert_array_equal(flat["targets"][:count], stream_targets)  # exact, in order
  np.testing.assert_array_equal(flat["inputs"][:count], stream_inputs)
  np.testing.assert_array_equal(flat["segment_ids"][:count], stream_segments)
  for name in flat:  # only the last block's tail is padding
    assert (flat[name][count:] == PAD_ID).all()
  # The newlines are text: each document's tokens read back as its file, blank line and all.
  decoded = sentencepiece.detokenize(tf.ragged.constant(documents).to_tensor()).numpy()
  assert [d.decode() for d in decoded] == list(FILES.values())


def test_without_segments_the_blocks_have_no_segment_ids(files, sentencepiece):
  dataset = language_model_data.packed_dataset(
    _pieces(files), sentencepiece, batch_size=2, max_length=8
  )
  batch = next(iter(dataset))
  assert set(batch) == {"inputs", "targets"}


def test_training_blocks_are_full_and_the_iterator_resumes_exactly(files, sentencepiece, tmp_path):
  dataset = language_model_data.packed_dataset(
    streams.text_pieces(files, document_per_line=False, seed=5),
    sentencepiece,
    batch_size=2,
    max_length=7,
    shuffle_seed=3,
    repeat=True,
    drop_remainder=True,
    segments=True,
    shuffle_tokens=70,  # ten blocks: a buffer the size of this tiny corpus
  )
  iterator = iter(dataset)
  for _ in range(3):
    next(iterator)
  checkpoint = tf.train.Checkpoint(data=iterator)
  path = checkpoint.save(str(tmp_path / "ckpt"))
  expected = [next(iterator) for _ in range(12)]  # several passes over the two documents
  for batch in expected:
    assert batch["targets"].shape == (2, 7) and (batch["targets"].numpy() != PAD_ID).all()
  resumed = iter(dataset)
  tf.train.Checkpoint(data=resumed).restore(path)
  for want in expected:
    got = next(resumed)
    for name in want:
      np.testing.assert_array_equal(got[name].numpy(), want[name].numpy())


def test_the_line_mode_counts_its_cut_texts_and_dropped_pieces(sentencepiece):
  lines = ["the cat sees the dog", "a bird", "and the dog runs away"]
  lengths = [int(sentencepiece.tokenize(tf.constant([line])).row_lengths()[0]) for line in lines]
  limit = sorted(lengths)[1]  # the middle length: one text is longer
  texts = tf.data.Dataset.from_tensor_slices(lines)
  assert language_model_data.report_cut_texts(texts, sentencepiece, limit, "evaluation") == 1
  assert language_model_data.report_cut_texts(texts, sentencepiece, max(lengths), "x") == 0
