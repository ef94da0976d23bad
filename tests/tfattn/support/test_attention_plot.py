"""Heat maps of attention weights as PNG bytes (`tfattn.support.attention_plot`): size,
content, labels."""

import numpy as np
import pytest
import tensorflow as tf

from tfattn.support import attention_plot

SOURCE = ["\u2581Ein", " Mann", " kostet", " $5", "."]
TARGET = [" A", " man", " costs", " $5", "[END]"]


def _weights(*shape, seed=0):
  return np.random.RandomState(seed).dirichlet(np.ones(shape[-1]), size=shape[:-1])


def _image(png):
  image = attention_plot.image_tensor(png)
  assert image.dtype == tf.uint8 and image.shape[0] == 1 and image.shape[-1] == 4
  return image[0].numpy()


def test_one_layer_png_has_the_promised_size_and_is_not_blank():
  png = attention_plot.render_png(_weights(4, 5, 5), SOURCE, TARGET, title="cross-attention")
  assert png[:8] == b"\x89PNG\r\n\x1a\n"
  image = _image(png)
  width, height = attention_plot.figure_pixels(1, 4, SOURCE, TARGET)
  assert image.shape[:2] == (height, width)
  assert width > 4 * attention_plot.MIN_PANEL_INCHES * attention_plot.DPI > height
  assert image[..., :3].std() > 20  # heat maps and labels, not a blank canvas


def test_every_layer_adds_a_row_and_the_weights_change_the_picture():
  one = _image(attention_plot.render_png(_weights(2, 5, 5), SOURCE, TARGET))
  three = _image(
    attention_plot.render_png(
      _weights(3, 2, 5, 5), SOURCE, TARGET, layer_names=["layer 0", "layer 1", "layer 2"]
    )
  )
  assert three.shape[1] == one.shape[1] and three.shape[0] > 2.5 * one.shape[0]
  other = _image(attention_plot.render_png(_weights(2, 5, 5, seed=1), SOURCE, TARGET))
  assert other.shape == one.shape and np.abs(other.astype(int) - one).sum() > 0


def test_long_inputs_stop_growing_and_label_every_nth_piece(monkeypatch):
  from matplotlib.axes import Axes

  pieces = [f"p{i}" for i in range(150)]
  width, height = attention_plot.figure_pixels(1, 1, pieces, pieces)
  capped = attention_plot.PIECE_INCHES * attention_plot.LABELLED_PIECES * attention_plot.DPI
  assert capped < width < capped + 200 and capped < height < capped + 200
  drawn = {}

  def record(axis):
    original = getattr(Axes, f"set_{axis}ticks")

    def set_ticks(self, ticks, labels=None, **kwargs):
      drawn[axis] = (list(ticks), list(labels) if labels is not None else None)
      return original(self, ticks, labels, **kwargs)

    monkeypatch.setattr(Axes, f"set_{axis}ticks", set_ticks)

  record("x")
  record("y")
  image = _image(attention_plot.render_png(_weights(1, 150, 150), pieces, pieces))
  assert image.shape[:2] == (height, width)
  every_third = list(range(0, 150, 3))  # ceil(150 / 60) = 3: 50 labels, not 150
  assert drawn["x"] == (every_third, [f"p{i}" for i in every_third])
  assert drawn["y"] == drawn["x"]


@pytest.mark.parametrize("piece_length", [1, 12, 40])
def test_labels_and_titles_stay_inside_the_picture(piece_length):
  """The margins come from the labels' measured sizes: however long the pieces, nothing is cut
  at the picture's edges (its outer pixels stay background) and the panels are drawn."""
  pieces = [f"{i}" + "w" * (piece_length - 1) for i in range(6)]
  image = _image(
    attention_plot.render_png(
      _weights(2, 3, 6, 6), pieces, pieces, title="a title", layer_names=["a", "b"]
    )
  )[..., :3]
  edges = [image[:2], image[-2:], image[:, :2], image[:, -2:]]
  assert all((edge == 255).all() for edge in edges)
  colored = image.astype(int).std(axis=-1) > 30  # heat maps; labels and frames are gray
  assert colored.mean() > 0.05


def test_labels_are_checked_against_the_weights():
  with pytest.raises(ValueError, match="5 x 5 but there are 4 query and 5 key labels"):
    attention_plot.render_png(_weights(1, 5, 5), SOURCE, TARGET[:4])


def test_display_piece_shows_spaces_and_escapes_mathematics():
  assert attention_plot.display_piece(" $5") == "\u2581\\$5"
  assert attention_plot.display_piece("") == "\u2205"
  assert (
    attention_plot.display_piece("\n") == "\\n" and attention_plot.display_piece("a\tb") == "a\\tb"
  )


def test_a_character_models_line_break_piece_draws_without_warnings():
  import warnings

  pieces = ["a", "\n", " ", "b"]
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    png = attention_plot.render_png(_weights(1, 4, 4), pieces, pieces)
  assert _image(png).shape[:2] == attention_plot.figure_pixels(1, 1, pieces, pieces)[::-1]
