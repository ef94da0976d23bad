"""Does a translation model's cross-attention align words? On Multi30k's test2016, for 20 common
German -> English noun pairs: in every test sentence pair whose source holds the German noun and
whose reference holds the English one, translate the source with the export (its own output,
through the `attention` signature) and, where the translation holds the English noun, ask
whether the English noun's first piece puts its largest attention (mean over heads) on one of
the German noun's pieces. Reported per decoder layer, beside chance (the German noun's share of
the source pieces).

  python benchmarks/attention_alignment.py --model_base_path=models/multi30k \\
      --multi30k=data/multi30k [--picture=docs/attention_example.png]

`--picture` also draws the cross-attention of one test sentence (the first that holds a noun
pair in source, reference and translation) with `python -m serving.tools.attention_maps`'s renderer.
"""

import cli
import common

import dataclasses
import json
import os
import re
from typing import Dict, List, Optional, Tuple

import numpy as np

from settings import setting

# Common Multi30k nouns, German -> English (singular and plural forms as separate pairs).
NOUN_PAIRS = [
  ("Mann", "man"),
  ("Frau", "woman"),
  ("Hund", "dog"),
  ("Junge", "boy"),
  ("Mädchen", "girl"),
  ("Kind", "child"),
  ("Männer", "men"),
  ("Frauen", "women"),
  ("Straße", "street"),
  ("Wasser", "water"),
  ("Ball", "ball"),
  ("Hemd", "shirt"),
  ("Hut", "hat"),
  ("Gebäude", "building"),
  ("Strand", "beach"),
  ("Auto", "car"),
  ("Pferd", "horse"),
  ("Schnee", "snow"),
  ("Jacke", "jacket"),
  ("Gruppe", "group"),
]


def word_span(text: str, word: str, ignore_case: bool) -> Optional[Tuple[int, int]]:
  """(start, end) characters of `word`'s first whole-word occurrence in `text`, or None."""
  match = re.search(rf"(?<!\w){re.escape(word)}(?!\w)", text, re.IGNORECASE if ignore_case else 0)
  return match.span() if match else None


def piece_spans(pieces: List[str]) -> List[Tuple[int, int]]:
  """The character span each piece covers in the joined text (lossless SentencePiece: the
  pieces join back into the text; "[END]" covers nothing)."""
  spans, position = [], 0
  for piece in pieces:
    width = 0 if piece == "[END]" else len(piece)
    spans.append((position, position + width))
    position += width
  return spans


def pieces_overlapping(spans, start: int, end: int) -> List[int]:
  """Indices of the pieces whose characters overlap [start, end) (a piece's leading space
  aside: SentencePiece glues the space before a word to its first piece)."""
  return [i for i, (a, b) in enumerate(spans) if a < end and b > start and b > a]


def first_piece_at(spans, start: int) -> Optional[int]:
  """The piece holding character `start` (the noun's first letter)."""
  for i, (a, b) in enumerate(spans):
    if a <= start < b:
      return i
  return None


def read_test_pairs(folder: str) -> List[Tuple[str, str]]:
  with open(os.path.join(folder, "test_2016_flickr.de"), encoding="utf-8") as f:
    sources = [line.rstrip("\n") for line in f]
  with open(os.path.join(folder, "test_2016_flickr.en"), encoding="utf-8") as f:
    references = [line.rstrip("\n") for line in f]
  return list(zip(sources, references))


@dataclasses.dataclass(frozen=True)
class AttentionAlignmentFlags:
  """The flags of `benchmarks/attention_alignment.py`."""

  model_base_path: Optional[str] = setting(
    None,
    "A Multi30k de->en export's base path (the newest version is used) or a version directory.",
  )
  multi30k: Optional[str] = setting(None, "Folder with test_2016_flickr.de and .en.")
  picture: Optional[str] = setting(
    None, "Also draw one test sentence's cross-attention here (.png)."
  )
  results: Optional[str] = setting(None, "Write the per-layer results as JSON here.")
  batch_size: int = setting(8, "Sentences per request to the signature.", minimum=1)


def _define_flags():

  cli.define_flags(AttentionAlignmentFlags)
  # Every layer's weights come back: 8 full-length Multi30k rows stay inside the signature's bound.


def main(argv):
  cli.start_tensorflow_quietly()  # the flags are good: now TensorFlow, quietly
  del argv  # cli.run refuses positional arguments
  from absl import flags

  from serving.tools import attention_maps

  f = flags.FLAGS
  if not f.model_base_path or not f.multi30k:
    raise cli.UsageError("give --model_base_path and --multi30k")
  path = attention_maps.version_directory(f.model_base_path, None)
  pairs = read_test_pairs(f.multi30k)
  cases = []  # (test index, German noun, English noun)
  for index, (source, reference) in enumerate(pairs):
    for german, english in NOUN_PAIRS:
      if word_span(source, german, False) and word_span(reference, english, True):
        cases.append((index, german, english))
  indices = sorted({index for index, _, _ in cases})
  print(f"device: {common.device_description()}")
  print(
    f"{len(cases)} (sentence, noun pair) cases in {len(indices)} of {len(pairs)} test sentences"
  )

  import tensorflow as tf
  import tensorflow_text  # noqa: F401  registers the tokenizer ops

  signature = tf.saved_model.load(path).signatures["attention"]
  rows: Dict[int, dict] = {}
  for start in range(0, len(indices), f.batch_size):
    chunk = indices[start : start + f.batch_size]
    outputs = signature(
      text=tf.constant([pairs[i][0] for i in chunk]),
      target=tf.constant([""] * len(chunk)),
      layer=tf.constant([-1] * len(chunk)),
    )
    outputs = {name: value.numpy() for name, value in outputs.items()}
    for row, index in enumerate(chunk):
      rows[index] = attention_maps.maps_from_outputs({k: v[row] for k, v in outputs.items()}, -1)

  layers = rows[indices[0]].weights["cross"].shape[0]
  hits, judged, chance, missing = np.zeros(layers), 0, [], 0
  example = None
  for index, german, english in cases:
    maps = rows[index]
    translation = "".join(p for p in maps.target_pieces if p != "[END]")
    target_span = word_span(translation, english, True)
    if target_span is None:
      missing += 1  # the model's translation does not hold the noun: nothing to align
      continue
    query = first_piece_at(piece_spans(maps.target_pieces), target_span[0])
    source_span = word_span("".join(maps.source_pieces), german, False)
    keys = pieces_overlapping(piece_spans(maps.source_pieces), *source_span)
    if query is None or not keys:
      missing += 1
      continue
    mean_over_heads = maps.weights["cross"][:, :, query, :].mean(axis=1)  # [layers, s_len]
    hits += np.isin(mean_over_heads.argmax(axis=-1), keys)
    judged += 1
    chance.append(len(keys) / len(maps.source_pieces))
    if example is None:
      example = (maps, german, english)
  print(f"judged {judged} cases; {missing} skipped (the translation lacks the English noun)")
  print("\n| decoder layer | largest attention on the German noun | chance |")
  print("|---|---|---|")
  for layer in range(layers):
    print(
      f"| {layer} | {hits[layer] / max(judged, 1):.3f} ({int(hits[layer])}/{judged}) | "
      f"{np.mean(chance):.3f} |"
    )
  if f.results:
    with open(f.results, "w") as out:
      json.dump(
        {
          "cases": len(cases),
          "judged": judged,
          "skipped": missing,
          "share_per_layer": (hits / max(judged, 1)).tolist(),
          "chance": float(np.mean(chance)),
          "export": path,
        },
        out,
        indent=2,
      )
  if f.picture and example is not None:
    maps, german, english = example
    last = layers - 1
    [(_, png)] = attention_maps.draw(maps, "cross", [last], one_picture=True)
    with open(f.picture, "wb") as out:
      out.write(png)
    print(
      f"\nwrote {f.picture}: layer {last} cross-attention of {attention_maps.describe(maps)} "
      f"({german} -> {english})"
    )


if __name__ == "__main__":
  _define_flags()
  cli.run(main)
