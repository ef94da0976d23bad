"""`python -m serving.tools.attention_maps` as a user types it: PNG and HTML maps for a seq2seq
export
(loaded locally) and a classifier export (through a running server's REST API); each mistake is
one line on stderr and exit status 2. The programs run as subprocesses, side by side."""

import cli

import base64
import html.parser
import os
import subprocess
import threading

import pytest
import tensorflow as tf

from serving.server.model_manager import ModelManager
from serving.server.rest_api import make_server
from serving.tools import attention_maps
from serving.tools.client import ServingClient
from tfattn.config import TransformerConfig
from tfattn.kinds import MODEL_KINDS
from tfattn.support import attention_plot

import classifier_fixtures
import warm_start
from train_helpers import REPO, free_ports

# The session's classifier run and export, shared by the attention tests.
classifier_run = classifier_fixtures.classifier_run
classifier_exported = classifier_fixtures.classifier_exported

pytestmark = pytest.mark.slow  # exports models, runs a server and programs

NAME = "reviews"


@pytest.fixture(scope="module")
def classifier_url(classifier_exported):
  manager = ModelManager(NAME, str(classifier_exported[0]), poll_seconds=60)
  manager.start()
  server = make_server(manager, "127.0.0.1", 0)
  threading.Thread(target=server.serve_forever, daemon=True).start()
  yield f"http://127.0.0.1:{server.server_address[1]}"
  server.shutdown()
  manager.stop()


def _run_all(commands):
  """Runs `python -m serving.tools.attention_maps ARGS` for each argument list, two at a time."""
  env = warm_start.environment()
  results = []
  for start in range(0, len(commands), 2):
    processes = [
      subprocess.Popen(
        [*warm_start.python(), "-m", "serving.tools.attention_maps", *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
      )
      for args in commands[start : start + 2]
    ]
    for process in processes:
      stdout, stderr = process.communicate(timeout=300)
      results.append((process.returncode, stdout, stderr))
  return results


def _png(path):
  with open(path, "rb") as f:
    image = tf.io.decode_png(f.read(), channels=3).numpy()
  assert image.std() > 20  # drawn, not blank
  return image


class _Page(html.parser.HTMLParser):
  def __init__(self):
    super().__init__()
    self.tags, self.sources = [], []

  def handle_starttag(self, tag, attrs):
    self.tags.append(tag)
    self.sources += [value for name, value in attrs if name in ("src", "href", "srcset")]


def _self_contained_images(path):
  """The page's pictures, after checking it loads nothing: no script, link or frame, every
  image an inline PNG data URI, no http(s) URL anywhere."""
  with open(path, encoding="utf-8") as f:
    page = f.read()
  parser = _Page()
  parser.feed(page)
  assert not {"script", "link", "iframe", "object", "embed"} & set(parser.tags)
  assert "http://" not in page and "https://" not in page
  prefix = "data:image/png;base64,"
  assert parser.sources and all(source.startswith(prefix) for source in parser.sources)
  return [
    tf.io.decode_png(base64.b64decode(source[len(prefix) :])).numpy() for source in parser.sources
  ]


def _maps(outputs, layer=-1):
  return attention_maps.maps_from_outputs(outputs, layer)


def test_pictures_of_a_local_seq2seq_export_and_a_served_classifier(
  exported, classifier_url, tmp_path
):
  base, path = exported
  out = {name: str(tmp_path / name) for name in ("s.png", "s.html", "c.png", "c.html")}
  results = _run_all(
    [
      [f"--model_base_path={base}", "--text=4213", f"--out={out['s.png']}"],
      [
        f"--model_base_path={path}",
        "--text=4213",
        "--target=four thousand",
        "--kind=decoder",
        "--all_layers",
        f"--out={out['s.html']}",
      ],
      [
        f"--server={classifier_url}",
        f"--model_name={NAME}",
        "--text=good film",
        "--all_layers",
        f"--out={out['c.png']}",
      ],
      [
        f"--server={classifier_url}",
        f"--model_name={NAME}",
        "--text=bad film",
        f"--out={out['c.html']}",
      ],
    ],
  )
  for returncode, stdout, stderr in results:
    assert returncode == 0, stderr[-3000:]
    assert stdout.startswith("wrote ") and "Traceback" not in stderr

  # The seq2seq PNG: the last (only) layer's cross-attention, 4 heads, of the model's own
  # translation, drawn at the size its pieces give.
  signature = tf.saved_model.load(path).signatures["attention"]
  outputs = signature(text=tf.constant(["4213"]), target=tf.constant([""]), layer=tf.constant([-1]))
  maps = _maps({name: value.numpy()[0] for name, value in outputs.items()})
  width, height = attention_plot.figure_pixels(1, 4, *attention_maps.labels(maps, "cross"))
  assert _png(out["s.png"]).shape == (height, width, 3)
  assert "cross-attention, layer 0;" in results[0][1]
  images = _self_contained_images(out["s.html"])
  assert len(images) == 1 and images[0][..., :3].std() > 20  # one layer: one picture

  # The classifier over REST: both layers in one PNG (a row each), the last one in the HTML.
  client = ServingClient(NAME, port=int(classifier_url.rsplit(":", 1)[1]))
  row = client.predict(instances=[{"text": "good film", "layer": -1}], signature_name="attention")[
    "predictions"
  ][0]
  maps = _maps(row)
  assert maps.layers == [0, 1] and not maps.seq2seq
  width, height = attention_plot.figure_pixels(2, 4, *attention_maps.labels(maps, "encoder"))
  assert _png(out["c.png"]).shape == (height, width, 3)
  images = _self_contained_images(out["c.html"])
  assert len(images) == 1 and images[0].shape[0] < height  # one layer's row
  assert "encoder self-attention, layer 1;" in results[3][1]


def test_mistakes_are_one_line_and_exit_2(exported, classifier_url, tmp_path):
  base, _ = exported
  empty = tmp_path / "empty"
  empty.mkdir()
  (unused_port,) = free_ports(1)
  png = str(tmp_path / "map.png")
  cases = [
    (["--text=1", f"--out={png}"], "give --model_base_path=DIR"),
    (
      [f"--model_base_path={base}", "--text=1", f"--out={tmp_path / 'map.jpg'}"],
      "the file must end in .png or .html",
    ),
    ([f"--model_base_path={empty}", "--text=1", f"--out={png}"], "holds no version folder"),
    (
      [f"--model_base_path={base}", "--text=1", "--layer=3", f"--out={png}"],
      "--layer=3: this model has 1 layer (0 to 0)",
    ),
    (
      [f"--server=http://127.0.0.1:{unused_port}", "--text=1", f"--out={png}"],
      "cannot reach http://127.0.0.1:",
    ),
    (
      [
        f"--server={classifier_url}",
        f"--model_name={NAME}",
        "--text=1",
        "--layer=5",
        f"--out={png}",
      ],
      "layer must be -1 (every layer) or 0 to 1",
    ),
    (
      [
        f"--server={classifier_url}",
        f"--model_name={NAME}",
        "--text=1",
        "--kind=cross",
        f"--out={png}",
      ],
      "--kind=cross: this model is a classifier",
    ),
    (
      [f"--model_base_path={base}", "--text=1", "--layer=0", "--all_layers", f"--out={png}"],
      "give --layer=N or --all_layers, not both",
    ),
  ]
  results = _run_all([args for args, _ in cases])
  for (args, message), (returncode, stdout, stderr) in zip(cases, results):
    lines = stderr.strip().splitlines()
    assert returncode == 2, (args, stderr[-2000:])
    assert len(lines) == 1 and lines[0].startswith("serving.tools.attention_maps: error: "), stderr
    assert message in lines[0], (message, lines[0])
    assert stdout == ""
  assert not os.path.exists(png) and not os.listdir(empty)


def test_html_page_escapes_text_and_inlines_pictures():
  page = attention_maps.html_page("<b>x</b>", ["a & b"], [("layer 0", b"\x89PNG fake")])
  assert "&lt;b&gt;x&lt;/b&gt;" in page and "a &amp; b" in page
  assert 'src="data:image/png;base64,iVBORyBmYWtl"' in page


def test_a_language_models_outputs_map_its_causal_self_attention():
  """A language model's `attention` signature has no encoder: its maps are the decoder
  self-attention over "[START]" and its pieces, the default kind, labelled by those pieces."""
  weights = tf.random.uniform([2, 3, 4, 4], seed=1).numpy()  # [layers, heads, length, length]
  outputs = {
    "source_pieces": [b"[START]", b"the", b" cat", b""],
    "source_length": 3,
    "decoder_attention": weights,
  }
  maps = _maps(outputs)
  assert set(maps.weights) == {"decoder"} and maps.default_kind == "decoder"
  assert maps.weights["decoder"].shape == (2, 3, 3, 3) and maps.layers == [0, 1]
  assert attention_maps.labels(maps, "decoder") == (["[START]", "the", " cat"],) * 2
  assert attention_maps.describe(maps) == "'[START]the cat'"


@pytest.mark.parametrize("kind_name", sorted(MODEL_KINDS))
def test_the_pre_load_check_reads_the_kinds_own_attention_layout(kind_name):
  """The export records its kind's layout; the tool refuses a map or layer outside it."""
  kind = MODEL_KINDS[kind_name]
  config = TransformerConfig(num_encoder_layers=2, num_decoder_layers=3)
  layout = kind.attention_layers(config)
  info = {"attention_layers": layout, "model_description": kind.model_description}
  for name, layers in layout.items():
    attention_maps.check_against_info(info, name, layers - 1)
    with pytest.raises(cli.UsageError, match=f"--layer={layers}: this model has {layers} layers"):
      attention_maps.check_against_info(info, name, layers)
  for missing in set(attention_maps.KINDS) - set(layout):
    with pytest.raises(cli.UsageError, match=f"this model is {kind.model_description}"):
      attention_maps.check_against_info(info, missing, None)
  attention_maps.check_against_info({}, "cross", 99)  # an older export: checked after loading


def test_a_kind_without_attention_is_refused_in_its_own_words():
  """A kind whose `attention_layers` is empty (no `attention` signature) is refused before
  loading, naming the model, not taken for an export older than the record."""
  info = {"attention_layers": {}, "model_description": "a regressor"}
  with pytest.raises(cli.UsageError, match="this model is a regressor: its export has no"):
    attention_maps.check_against_info(info, None, None)


def test_an_export_records_its_attention_layout(exported):
  base, _ = exported
  info = attention_maps.export_info(attention_maps.version_directory(base, None))
  assert info["attention_layers"] == {"encoder": 1, "decoder": 1, "cross": 1}
  assert info["model_description"] == "a translation model"
