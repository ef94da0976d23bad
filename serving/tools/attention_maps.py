"""`python -m serving.tools.attention_maps`: draws a model's attention maps for one text, from a
local export or a running server's REST API (the `attention` signature), to a PNG or an HTML page.

  python -m serving.tools.attention_maps --model_base_path=models/tfattn --text="4213" --out=map.png
  python -m serving.tools.attention_maps --server=http://127.0.0.1:8501 --model_name=tfattn \\
      --text="Ein Mann schläft." --kind=cross --all_layers --out=map.html

A panel per head of one layer (the last unless --layer; every layer with --all_layers): keys
(source pieces) along x, queries along y (for the decoder and cross-attention, the target piece
each query predicts). The HTML page is self-contained: its images are inlined as base64 data
URIs, it loads nothing.
"""

import cli

import base64
import dataclasses
import html
import json
import os
import urllib.error
import urllib.parse
from typing import Dict, List, Optional

from serving.tf_serving import versions
from settings import setting

KINDS = ("cross", "encoder", "decoder")
KIND_NAMES = {
  "cross": "cross-attention",
  "encoder": "encoder self-attention",
  "decoder": "decoder self-attention",
}
FORMATS = (".png", ".html")
SIGNATURE = "attention"
# assets.extra/tfattn.json (serving.export.EXPORT_INFO_FILE; read here without importing
# TensorFlow, so mistakes are found before it starts).
EXPORT_INFO = os.path.join("assets.extra", "tfattn.json")


@dataclasses.dataclass
class Maps:
  """One example's attention, cut to its real pieces.

  Attributes:
    source_pieces: the source (key) pieces; a language model's "[START]" and its text's pieces.
    target_pieces: the target pieces (seq2seq; None for a classifier or a language model).
    weights: {kind: float32 `[layers, heads, q_len, k_len]`} for the kinds the model has.
    layers: the layer number of each returned layer.
    label: the classifier's label (None for seq2seq and a language model).
  """

  source_pieces: List[str]
  target_pieces: Optional[List[str]]
  weights: Dict[str, "object"]
  layers: List[int]
  label: Optional[int] = None

  @property
  def seq2seq(self) -> bool:
    return self.target_pieces is not None

  @property
  def default_kind(self) -> str:
    """cross for seq2seq, else the model's only attention (encoder or a language model's
    decoder)."""
    return "cross" if self.seq2seq else next(iter(self.weights))


def maps_from_outputs(outputs, layer) -> Maps:
  """The `attention` signature's outputs for one row (arrays or JSON lists) -> `Maps`."""
  import numpy as np

  def text(values):
    return [v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in values]

  s_len = int(outputs["source_length"])
  source = text(outputs["source_pieces"])[:s_len]
  # A language model has only its causal self-attention over its own pieces ("decoder").
  own = "encoder" if "encoder_attention" in outputs else "decoder"
  weights = {own: np.asarray(outputs[f"{own}_attention"], np.float32)[..., :s_len, :s_len]}
  target = None
  if "cross_attention" in outputs:
    t_len = int(outputs["target_length"])
    target = text(outputs["target_pieces"])[:t_len]
    weights["decoder"] = np.asarray(outputs["decoder_attention"], np.float32)[..., :t_len, :t_len]
    weights["cross"] = np.asarray(outputs["cross_attention"], np.float32)[..., :t_len, :s_len]
  count = weights[own].shape[0]
  layers = list(range(count)) if layer < 0 else [layer]
  label = int(outputs["label"]) if "label" in outputs else None
  return Maps(source, target, weights, layers, label)


def labels(maps: Maps, kind: str):
  """(x labels, y labels) of `kind`'s maps."""
  if kind == "encoder":
    return maps.source_pieces, maps.source_pieces
  if kind == "decoder":
    pieces = maps.target_pieces if maps.seq2seq else maps.source_pieces
    return pieces, pieces
  return maps.source_pieces, maps.target_pieces


def _shortened(text: str, limit: int = 60) -> str:
  return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def describe(maps: Maps) -> str:
  """One line for titles: 'source' -> 'target', or 'source': label N."""
  source = _shortened("".join(maps.source_pieces))
  if maps.seq2seq:
    target = _shortened("".join(p for p in maps.target_pieces if p != "[END]"))
    return f"{source!r} -> {target!r}"
  return f"{source!r}" if maps.label is None else f"{source!r}: label {maps.label}"


def draw(maps: Maps, kind: str, draw_layers: List[int], one_picture: bool):
  """-> [(caption, PNG bytes)]: one picture with a row per layer, or one a layer."""
  from tfattn.support import attention_plot

  x_labels, y_labels = labels(maps, kind)
  weights = maps.weights[kind]  # [returned layers, heads, q, k]
  positions = {layer: i for i, layer in enumerate(maps.layers)}
  names = [f"layer {layer}" for layer in draw_layers]
  title = f"{KIND_NAMES[kind]}: {describe(maps)}"
  if one_picture:
    chosen = weights[[positions[layer] for layer in draw_layers]]
    return [
      (
        ", ".join(names),
        attention_plot.render_png(chosen, x_labels, y_labels, title=title, layer_names=names),
      )
    ]
  return [
    (
      name,
      attention_plot.render_png(
        weights[positions[layer]][None],
        x_labels,
        y_labels,
        title=f"{title} ({name})",
        layer_names=[name],
      ),
    )
    for name, layer in zip(names, draw_layers)
  ]


def html_page(title: str, lines: List[str], pictures) -> str:
  """A self-contained page: the pictures inlined as PNG data URIs; no script, no link."""
  body = [f"<h1>{html.escape(title)}</h1>"]
  body += [f"<p>{html.escape(line)}</p>" for line in lines]
  for caption, png in pictures:
    data = base64.b64encode(png).decode("ascii")
    body.append(
      f'<figure><img alt="{html.escape(caption)}" src="data:image/png;base64,{data}">'
      f"<figcaption>{html.escape(caption)}</figcaption></figure>"
    )
  style = "body{font-family:sans-serif;margin:1em} img{max-width:100%;height:auto}"
  return (
    '<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
    f"<title>{html.escape(title)}</title><style>{style}</style></head>\n<body>\n"
    + "\n".join(body)
    + "\n</body></html>\n"
  )


# ---- where the maps come from --------------------------------------------------------------


def version_directory(base_path: str, version: Optional[int]) -> str:
  """The SavedModel to load: `base_path` itself when it is one, else its newest (or the given)
  version. A mistake is a UsageError."""
  if not os.path.isdir(base_path):
    raise cli.UsageError(f"--model_base_path {base_path} is not a directory")
  if os.path.isfile(os.path.join(base_path, versions.SAVED_MODEL_FILE)):
    if version is not None:
      raise cli.UsageError(
        f"--model_base_path {base_path} is a version directory itself; "
        "drop --version or give its base path"
      )
    return base_path
  found = versions.version_numbers(base_path)
  if not found:
    raise cli.UsageError(
      f"--model_base_path {base_path} holds no version folder "
      "(<N>/saved_model.pb); export one with python -m serving.export"
    )
  if version is None:
    return os.path.join(base_path, str(found[-1]))
  if version not in found:
    raise cli.UsageError(
      f"--version={version} is not in {base_path} (versions: {', '.join(map(str, found))})"
    )
  return os.path.join(base_path, str(version))


def export_info(path: str) -> Optional[dict]:
  """The export's own record (task kind, model config), if it has one."""
  try:
    with open(os.path.join(path, EXPORT_INFO)) as f:
      return json.load(f)
  except (OSError, ValueError):
    return None


def refusal(kind: str, kinds, model: str) -> str:
  """The one line for a --kind the model does not have."""
  return f"--kind={kind}: this model is {model}; its only attention is --kind={kinds[0]}"


def check_against_info(info: Optional[dict], kind: Optional[str], layer: Optional[int]):
  """Refuses a kind or layer the exported model does not have, before it is loaded. The export
  records its attention layout ({map: layers}; exports older than the record are checked after
  loading, against the signature's own outputs)."""
  layout = (info or {}).get("attention_layers")
  if layout is None:
    return
  model = info.get("model_description", "this model")
  if not layout:  # a kind whose export draws no attention
    raise cli.UsageError(f"this model is {model}: its export has no attention maps to draw")
  if kind is not None and kind not in layout:
    raise cli.UsageError(refusal(kind, list(layout), model))
  count = layout[kind] if kind is not None else min(layout.values())
  if layer is not None and layer >= count:
    raise cli.UsageError(
      f"--layer={layer}: this model has {count} layer{'s' if count != 1 else ''} (0 to {count - 1})"
    )


def from_export(path: str, text: str, target: str, layer: int) -> Dict:
  """Calls the local export's `attention` signature on one text -> {output: numpy row}."""
  cli.start_tensorflow_quietly()
  import tensorflow as tf
  import tensorflow_text  # noqa: F401  registers the tokenizer ops

  signatures = tf.saved_model.load(path).signatures
  if SIGNATURE not in signatures:
    raise cli.UsageError(
      f"{path} has no '{SIGNATURE}' signature (exported before it "
      "existed?); export the run again with python -m serving.export"
    )
  function = signatures[SIGNATURE]
  inputs = {"text": tf.constant([text]), "layer": tf.constant([layer])}
  if "target" in function.structured_input_signature[1]:
    inputs["target"] = tf.constant([target])
  elif target:
    raise cli.UsageError("--target: this model has no target (a classifier or a language model)")
  try:
    outputs = function(**inputs)
  except tf.errors.InvalidArgumentError as error:
    from serving.server.model_manager import error_reason

    raise cli.UsageError(error_reason(error.message)) from None
  return {name: value.numpy()[0] for name, value in outputs.items()}


def _client(server: str, model_name: str, timeout: float):
  from serving.tools.client import ServingClient

  url = urllib.parse.urlsplit(server)
  if url.scheme != "http" or not url.hostname or url.path not in ("", "/"):
    raise cli.UsageError(f"--server={server}: give the REST address as http://HOST:PORT")
  try:
    port = url.port or 80
  except ValueError:
    raise cli.UsageError(f"--server={server}: the port is not a number") from None
  return ServingClient(model_name, url.hostname, port, timeout=timeout)


def from_server(client, text: str, target: str, layer: int, kind: Optional[str]) -> Dict:
  """Asks a running server's `attention` signature over REST -> {output: JSON row}; the model's
  metadata is read first, so a kind the model lacks is refused before it computes anything."""
  from serving.tools.client import ServingError

  try:
    signatures = client.metadata()["metadata"]["signature_def"]["signature_def"]
  except ServingError as error:
    raise cli.UsageError(f"{client.base} answered {error}") from None
  except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as error:
    reason = getattr(error, "reason", error)
    raise cli.UsageError(
      f"cannot reach {client.base} ({reason}); is the server running? "
      "start one with python -m serving.server"
    ) from None
  if SIGNATURE not in signatures:
    raise cli.UsageError(
      f"{client.base} serves no '{SIGNATURE}' signature (exported before "
      "it existed?); export the run again with python -m serving.export"
    )
  row = {"text": text, "layer": layer}
  if "target" in signatures[SIGNATURE]["inputs"]:
    row["target"] = target
  elif target:
    raise cli.UsageError("--target: this model has no target (a classifier or a language model)")
  else:
    outputs = signatures[SIGNATURE]["outputs"]
    own = "encoder" if "encoder_attention" in outputs else "decoder"
    if kind not in (None, own):
      model = "a classifier" if own == "encoder" else "a language model"
      raise cli.UsageError(refusal(kind, (own,), model))
  try:
    return client.predict(instances=[row], signature_name=SIGNATURE)["predictions"][0]
  except ServingError as error:
    if error.status == 400:  # the request's mistake: an unknown layer, too many weights
      raise cli.UsageError(error.message) from None
    raise cli.RunError(f"{client.base} answered {error}") from None


# ---- the program ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class AttentionMapsFlags:
  """The flags of `python -m serving.tools.attention_maps`."""

  model_base_path: Optional[str] = setting(
    None,
    "A local export: the base path (its newest version, or --version) or a "
    "version directory. Give this or --server.",
  )
  version: Optional[int] = setting(None, "With --model_base_path: the version to load.", minimum=1)
  server: Optional[str] = setting(
    None,
    "A running server's REST address, e.g. http://127.0.0.1:8501 "
    "(python -m serving.server or TF Serving). Give this or "
    "--model_base_path.",
  )
  model_name: str = setting("tfattn", "With --server: the model's name.")
  text: Optional[str] = setting(None, "The input text (required).")
  target: str = setting(
    "", "Seq2seq: the target text to attend with (default: the model's own translation)."
  )
  out: Optional[str] = setting(
    None, "Where to write: a .png picture or a self-contained .html page (required)."
  )
  layer: Optional[int] = setting(
    None, "The layer to draw, 0 = the first (default: the last).", minimum=0
  )
  all_layers: bool = setting(False, "Draw every layer (a row of heads each).")
  kind: Optional[str] = setting(
    None,
    "Which attention: cross (decoder to source), encoder or decoder "
    "self-attention (default: cross for seq2seq, encoder for a classifier, decoder for a "
    "language model).",
    choices=tuple(KINDS),
  )
  timeout: float = setting(120.0, "With --server: seconds to wait for an answer.", minimum=0.0)


def _define_flags():

  cli.define_flags(AttentionMapsFlags)


def _check_flags(f):
  """Every mistake that needs no model, before anything is loaded."""
  if bool(f.model_base_path) == bool(f.server):
    raise cli.UsageError(
      "give --model_base_path=DIR (a local export) or --server=http://HOST:"
      "PORT (a running server), one of them"
    )
  if f.text is None:
    raise cli.UsageError("--text is required: the text whose attention to draw")
  if not f.out:
    raise cli.UsageError("--out is required: a .png or .html file to write")
  if os.path.splitext(f.out)[1].lower() not in FORMATS:
    raise cli.UsageError(f"--out={f.out}: the file must end in .png or .html")
  folder = os.path.dirname(os.path.abspath(f.out))
  if not os.path.isdir(folder):
    raise cli.UsageError(f"--out={f.out}: the folder {folder} does not exist")
  if f.all_layers and f.layer is not None:
    raise cli.UsageError("give --layer=N or --all_layers, not both")
  if f.version is not None and f.server:
    raise cli.UsageError("--version goes with --model_base_path; a server serves its own")


def main(argv):
  del argv  # cli.run refuses positional arguments
  from absl import flags

  f = flags.FLAGS
  _check_flags(f)
  # One layer when asked for, else every layer (the last is drawn unless --all_layers).
  wanted = -1 if f.layer is None else f.layer
  if f.model_base_path:
    path = version_directory(f.model_base_path, f.version)
    check_against_info(export_info(path), f.kind, f.layer)
    outputs, where = from_export(path, f.text, f.target, wanted), path
  else:
    client = _client(f.server, f.model_name, f.timeout)
    # Named without the scheme: the page holds no URL a browser could follow.
    where = f"{urllib.parse.urlsplit(f.server).netloc}, model {f.model_name}"
    outputs = from_server(client, f.text, f.target, wanted, f.kind)
  maps = maps_from_outputs(outputs, wanted)
  kind = f.kind or maps.default_kind
  if kind not in maps.weights:
    model = "a classifier" if "encoder" in maps.weights else "a language model"
    raise cli.UsageError(refusal(kind, list(maps.weights), model))
  draw_layers = maps.layers if f.all_layers else maps.layers[-1:]
  as_html = f.out.lower().endswith(".html")
  pictures = draw(maps, kind, draw_layers, one_picture=not as_html)
  if as_html:
    lines = [f"model: {where}", f"source pieces: {' | '.join(maps.source_pieces)}"]
    if maps.seq2seq:
      lines.append(
        f"target pieces: {' | '.join(maps.target_pieces)}"
        + ("" if f.target else " (the model's own translation)")
      )
    elif maps.label is not None:
      lines.append(f"label: {maps.label}")
    page = html_page(f"{KIND_NAMES[kind]}: {describe(maps)}", lines, pictures)
    with open(f.out, "w", encoding="utf-8") as file:
      file.write(page)
  else:
    with open(f.out, "wb") as file:
      file.write(pictures[0][1])
  print(f"wrote {f.out}: {KIND_NAMES[kind]}, {', '.join(c for c, _ in pictures)}; {describe(maps)}")


if __name__ == "__main__":
  _define_flags()
  cli.run(main)
