"""Attention maps as pictures: one heat map a head, the pieces as tick labels, rendered by
matplotlib's Agg canvas (no display, no pyplot state) to PNG bytes. The margins are set from the
labels' measured sizes, not by matplotlib's constrained layout, which measures every tick label
of every panel on each draw (with the query pieces ticked once a row, a 4-head picture of 16
pieces: 0.449 -> 0.241 CPU s; a training run draws `--attention_images` pictures at every
evaluation).

`render_png` draws what `AttentionWeights` (or the export's `attention` signature) holds for
one example; `python -m serving.tools.attention_maps` writes it to a file, and `image_tensor` turns
it into what `tf.summary.image` takes. matplotlib is imported only when a picture is drawn.

Layout: a row of panels per layer, a panel per head; keys (e.g. source pieces) along x, queries
(e.g. the target pieces each query predicts) along y, darkest = 0, brightest = the panel's
largest weight.
"""

import io
import warnings
from typing import Optional, Sequence, Tuple

import numpy as np

DPI = 100
# Inches per piece; a panel keeps every label readable up to LABELLED_PIECES pieces, then stops
# growing and labels every n-th piece.
PIECE_INCHES = 0.2
LABELLED_PIECES = 60
MIN_PANEL_INCHES = 1.6
LABEL_FONT_SIZE = 7
# Room for labels: inches per character of the longest piece, and fixed margins.
CHAR_INCHES = 0.07
MARGIN_INCHES = 0.5
TITLE_INCHES = 0.5
# Between a tick label and its panel (tick length and pad), around the figure, between panels.
TICK_INCHES = 0.1
EDGE_INCHES = 0.08
GAP_INCHES = 0.15
MIN_DRAWN_PANEL_INCHES = 0.5


_SHOWN_AS = {" ": "\u2581", "\n": r"\n", "\r": r"\r", "\t": r"\t", "$": r"\$"}


def display_piece(piece: str) -> str:
  """A piece as a tick label: spaces as "▁" (SentencePiece's word marker, so " a" and "a" differ
  visibly), line breaks and tabs as `\\n`, `\\r`, `\\t` (a character model's pieces), "$"
  escaped (matplotlib reads $...$ as mathematics)."""
  for character, shown in _SHOWN_AS.items():
    piece = piece.replace(character, shown)
  return piece or "\u2205"


def _panel_inches(count: int) -> float:
  return max(MIN_PANEL_INCHES, PIECE_INCHES * min(count, LABELLED_PIECES))


def _label_inches(labels: Sequence[str]) -> float:
  return CHAR_INCHES * max((len(display_piece(label)) for label in labels), default=1)


def figure_inches(
  layers: int, heads: int, x_labels: Sequence[str], y_labels: Sequence[str]
) -> Tuple[float, float]:
  """(width, height) of the figure `render_png` draws for `layers` x `heads` panels."""
  width = heads * _panel_inches(len(x_labels)) + _label_inches(y_labels) + MARGIN_INCHES
  row = _panel_inches(len(y_labels)) + _label_inches(x_labels) + TITLE_INCHES
  return width + 0.15 * (heads - 1), layers * row + TITLE_INCHES


def figure_pixels(
  layers: int, heads: int, x_labels: Sequence[str], y_labels: Sequence[str]
) -> Tuple[int, int]:
  """(width, height) in pixels of the PNG `render_png` writes."""
  width, height = figure_inches(layers, heads, x_labels, y_labels)
  return round(width * DPI), round(height * DPI)


def _ticks(labels: Sequence[str]):
  step = max(1, -(-len(labels) // LABELLED_PIECES))  # ceil: at most LABELLED_PIECES labels
  positions = list(range(0, len(labels), step))
  return positions, [display_piece(labels[i]) for i in positions]


def render_png(
  weights,
  x_labels: Sequence[str],
  y_labels: Sequence[str],
  *,
  title: str = "",
  layer_names: Optional[Sequence[str]] = None,
) -> bytes:
  """Draws heat maps and returns the PNG file's bytes.

  Args:
    weights: float `[heads, q_len, k_len]` (one layer) or `[layers, heads, q_len, k_len]`,
      already cut to the real pieces.
    x_labels: the `k_len` key pieces (e.g. the source pieces).
    y_labels: the `q_len` query pieces (e.g. the target pieces each row predicts).
    title: drawn above the panels.
    layer_names: one name a layer row (default "layer 0", "layer 1", ...).
  Returns:
    PNG bytes, `figure_pixels(...)` in size.
  """
  weights = np.asarray(weights, np.float32)
  if weights.ndim == 3:
    weights = weights[np.newaxis]
  layers, _, q_len, k_len = weights.shape
  if (q_len, k_len) != (len(y_labels), len(x_labels)):
    raise ValueError(
      f"weights are {q_len} x {k_len} but there are {len(y_labels)} query and "
      f"{len(x_labels)} key labels"
    )
  layer_names = list(layer_names or [f"layer {i}" for i in range(layers)])
  with warnings.catch_warnings():
    # e.g. CJK in a Latin font ((?s): the glyph's own character may be a line break)
    warnings.filterwarnings("ignore", message="(?s)Glyph .* missing")
    return _draw(weights, x_labels, y_labels, title, layer_names)


def _draw(weights, x_labels, y_labels, title, layer_names) -> bytes:
  """`render_png`'s picture of `weights` `[layers, heads, q_len, k_len]`."""
  from matplotlib.backends.backend_agg import FigureCanvasAgg
  from matplotlib.figure import Figure
  from matplotlib.font_manager import FontProperties

  layers, heads = weights.shape[:2]
  width, height = figure_inches(layers, heads, x_labels, y_labels)
  figure = Figure(figsize=(width, height), dpi=DPI)
  renderer = FigureCanvasAgg(figure).get_renderer()
  x_ticks, y_ticks = _ticks(x_labels), _ticks(y_labels)

  def text_inches(texts, size):
    """(widest, tallest) of `texts` drawn at `size` points, in inches."""
    font = FontProperties(size=size)
    extents = [renderer.get_text_width_height_descent(t, font, ismath=False) for t in texts]
    return max(e[0] for e in extents) / DPI, max(e[1] for e in extents) / DPI

  label = LABEL_FONT_SIZE
  panel_title = text_inches([f"{name}, head 0" for name in layer_names], label + 1)[1]
  panel_title += TICK_INCHES
  top = EDGE_INCHES + panel_title + (text_inches([title], label + 3)[1] + 0.1 if title else 0)
  # Labels wider than figure_inches allowed for (glyphs wider than CHAR_INCHES) shrink the
  # panels, down to MIN_DRAWN_PANEL_INCHES; only longer ones are cut.
  left = EDGE_INCHES + text_inches(y_ticks[1] or ["0"], label)[0] + TICK_INCHES
  left = min(left, width - EDGE_INCHES - heads * MIN_DRAWN_PANEL_INCHES - (heads - 1) * GAP_INCHES)
  below = text_inches(x_ticks[1] or ["0"], label)[0] + TICK_INCHES  # x labels stand upright
  room = height - top - EDGE_INCHES - (layers - 1) * panel_title
  below = min(below, room / layers - MIN_DRAWN_PANEL_INCHES)
  rows = height - top - below - EDGE_INCHES
  columns = width - left - EDGE_INCHES
  row_gap = below + panel_title  # a row's x labels, then the next row's panel titles
  panel_height = (rows - (layers - 1) * row_gap) / layers
  panel_width = (columns - (heads - 1) * GAP_INCHES) / heads
  figure.subplots_adjust(
    left=left / width,
    right=1 - EDGE_INCHES / width,
    top=1 - top / height,
    bottom=(below + EDGE_INCHES) / height,
    wspace=GAP_INCHES / panel_width,
    hspace=row_gap / panel_height,
  )
  axes = figure.subplots(layers, heads, squeeze=False)
  for layer in range(layers):
    for head in range(heads):
      ax, panel = axes[layer, head], weights[layer, head]
      ax.imshow(
        panel,
        cmap="viridis",
        vmin=0.0,
        vmax=max(float(panel.max(initial=0.0)), 1e-6),
        aspect="auto",
        interpolation="nearest",
      )
      ax.set_title(f"{layer_names[layer]}, head {head}", fontsize=LABEL_FONT_SIZE + 1)
      ax.set_xticks(x_ticks[0], x_ticks[1], rotation=90, fontsize=LABEL_FONT_SIZE)
      # The query pieces once a row, at its first panel (ticks cost more than the heat maps).
      ax.set_yticks(*(y_ticks if head == 0 else ([], [])), fontsize=LABEL_FONT_SIZE)
  if title:
    figure.suptitle(title, fontsize=LABEL_FONT_SIZE + 3, y=1 - EDGE_INCHES / height, va="top")
  png = io.BytesIO()
  figure.savefig(png, format="png", dpi=DPI)
  return png.getvalue()


def image_tensor(png: bytes):
  """PNG bytes -> uint8 `[1, height, width, 4]`, what `tf.summary.image` takes."""
  import tensorflow as tf

  return tf.io.decode_png(png, channels=4)[tf.newaxis]
