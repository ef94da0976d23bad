"""Attention maps as pictures: one heat map a head, the pieces as tick labels, rendered by
matplotlib's Agg canvas (no display, no pyplot state) to PNG bytes.

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


def display_piece(piece: str) -> str:
  """A piece as a tick label: spaces as "▁" (SentencePiece's word marker, so " a" and "a" differ
  visibly), "$" escaped (matplotlib reads $...$ as mathematics)."""
  return piece.replace(" ", "\u2581").replace("$", r"\$") or "\u2205"


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
  from matplotlib.backends.backend_agg import FigureCanvasAgg
  from matplotlib.figure import Figure

  weights = np.asarray(weights, np.float32)
  if weights.ndim == 3:
    weights = weights[np.newaxis]
  layers, heads, q_len, k_len = weights.shape
  if (q_len, k_len) != (len(y_labels), len(x_labels)):
    raise ValueError(
      f"weights are {q_len} x {k_len} but there are {len(y_labels)} query and "
      f"{len(x_labels)} key labels"
    )
  layer_names = list(layer_names or [f"layer {i}" for i in range(layers)])
  figure = Figure(
    figsize=figure_inches(layers, heads, x_labels, y_labels), dpi=DPI, layout="constrained"
  )
  FigureCanvasAgg(figure)
  axes = figure.subplots(layers, heads, squeeze=False)
  x_ticks, y_ticks = _ticks(x_labels), _ticks(y_labels)
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
      ax.set_yticks(y_ticks[0], y_ticks[1] if head == 0 else [], fontsize=LABEL_FONT_SIZE)
  if title:
    figure.suptitle(title, fontsize=LABEL_FONT_SIZE + 3)
  png = io.BytesIO()
  with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="Glyph .* missing")  # e.g. CJK in a Latin font
    figure.savefig(png, format="png", dpi=DPI)
  return png.getvalue()


def image_tensor(png: bytes):
  """PNG bytes -> uint8 `[1, height, width, 4]`, what `tf.summary.image` takes."""
  import tensorflow as tf

  return tf.io.decode_png(png, channels=4)[tf.newaxis]
