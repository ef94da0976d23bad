"""TFDS data prepared locally by the tests: the real builder (its name, version, features and
file layout) writes a data_dir from rows the test gives instead of downloading."""

import tensorflow_datasets as tfds

# Splits each builder defines, as (name, rows) with rows in supervised-key order.
FAKE_ROWS = {
  "imdb_reviews": {
    "train": [("A wonderful, moving film. Loved it!", 1), ("Dull and far too long.", 0)] * 8,
    "test": [("Great acting, great story.", 1), ("Terrible. Avoid it.", 0)] * 4,
    "unsupervised": [("No label here.", -1)],
  },
  "ted_hrlr_translate/pt_to_en": {
    "train": [("Olá, mundo!", "Hello, world!"), ("A casa é azul.", "The house is blue.")] * 8,
    "validation": [("Obrigado.", "Thank you.")] * 4,
    "test": [("Sim.", "Yes.")] * 2,
  },
  "wmt14_translate/de-en": {
    "train": [("Guten Morgen!", "Good morning!"), ("Das Haus ist blau.", "The house is blue.")] * 8,
    "validation": [("Danke schön.", "Thank you very much.")] * 4,
    "test": [("Ja.", "Yes.")] * 2,
  },
  # One text a split, speeches between blank lines (rows of the one feature, "text").
  "tiny_shakespeare": {
    "train": [("First Citizen:\nBefore we proceed.\n\nAll:\nSpeak, speak.\n\n\nFirst:\nYou.",)],
    "validation": [("MENENIUS:\nWhat work's, my countrymen?\n\nAll:\nNay.",)],
    "test": [("ROMEO:\nBut soft!",)],
  },
}


def prepare_fake_tfds(name, data_dir, rows_by_split=None):
  """Runs the builder's own download_and_prepare with generated rows; returns the builder."""
  rows_by_split = rows_by_split or FAKE_ROWS[name]
  builder = tfds.builder(name, data_dir=str(data_dir))
  keys = builder.info.supervised_keys or tuple(builder.info.features.keys())

  def split_generators(dl_manager):
    del dl_manager  # nothing is downloaded
    return {
      split: ((f"{split}-{i}", dict(zip(keys, row))) for i, row in enumerate(rows))
      for split, rows in rows_by_split.items()
    }

  builder._split_generators = split_generators  # pylint: disable=protected-access
  builder.download_and_prepare(file_format="tfrecord")
  return builder
