"""The exports' `attention` signature over REST (the in-process server, as test_server.py runs
it): pieces and weights a client can draw, rows summing to 1 over real pieces, the layer
selector, and the size bound (a 1,000-piece input, a request over the limit)."""

import json
import threading
import urllib.request

import numpy as np
import pytest

from serving.export import attention_export, check
from serving.server.model_manager import ModelManager
from serving.server.rest_api import make_server
from serving.tools.client import ServingClient, ServingError

import classifier_fixtures

# The session's classifier run and export, shared by the attention tests.
classifier_run = classifier_fixtures.classifier_run
classifier_exported = classifier_fixtures.classifier_exported

pytestmark = pytest.mark.slow  # exports models and runs a server

NAME = "m"


def _serve(base):
  manager = ModelManager(NAME, str(base), poll_seconds=60)
  manager.start()
  server = make_server(manager, "127.0.0.1", 0, max_body_bytes=4 << 20)
  threading.Thread(target=server.serve_forever, daemon=True).start()
  return manager, server


@pytest.fixture(scope="module")
def seq2seq_server(exported):
  manager, server = _serve(exported[0])
  yield ServingClient(NAME, port=server.server_address[1]), server.server_address[1]
  server.shutdown()
  manager.stop()


@pytest.fixture(scope="module")
def classifier_server(classifier_exported):
  manager, server = _serve(classifier_exported[0])
  yield ServingClient(NAME, port=server.server_address[1])
  server.shutdown()
  manager.stop()


def _attention(client, rows):
  return client.predict(instances=rows, signature_name="attention")["predictions"]


def _assert_rows_sum_to_one_over_real_pieces(weights, query_length, key_length):
  """weights `[layers, heads, q, k]` (padded): real rows sum to 1, everything else is 0."""
  weights = np.asarray(weights)
  np.testing.assert_allclose(weights[:, :, :query_length, :key_length].sum(-1), 1.0, atol=1e-5)
  assert weights[:, :, query_length:].sum() == 0.0 and weights[:, :, :, key_length:].sum() == 0.0


def test_signature_is_listed_and_servable(exported, classifier_exported):
  for _, path in (exported, classifier_exported):
    assert check.problems(path) == []  # TF core and TF-Text ops that TF Serving links
    meta_graph = check.read_saved_model(path).meta_graphs[0]
    assert "attention" in meta_graph.signature_def  # what saved_model_cli show --all lists


def test_seq2seq_maps_over_rest(seq2seq_server):
  client, _ = seq2seq_server
  rows = _attention(
    client,
    [
      {"text": "4213", "target": "", "layer": -1},
      {"text": "17", "target": "four thousand", "layer": -1},
    ],
  )
  own, given = rows
  assert own["source_pieces"][: own["source_length"]] == ["4", "2", "1", "3"]
  assert "".join(own["source_pieces"]) == "4213"  # "" past the length
  # An empty target: the model's own translation, as serving_default decodes it.
  translation = client.predict(instances=["4213"])["predictions"][0]["translation"]
  own_target = own["target_pieces"][: own["target_length"]]
  assert "".join(p for p in own_target if p != "[END]") == translation
  # A given target: its pieces (joining back into it), then END.
  target = given["target_pieces"][: given["target_length"]]
  assert "".join(target[:-1]) == "four thousand" and target[-1] == "[END]"
  for row in rows:
    s_len, t_len = row["source_length"], row["target_length"]
    layers, heads = 1, 4
    assert np.shape(row["cross_attention"]) == (
      layers,
      heads,
      len(row["target_pieces"]),
      len(row["source_pieces"]),
    )
    _assert_rows_sum_to_one_over_real_pieces(row["encoder_attention"], s_len, s_len)
    _assert_rows_sum_to_one_over_real_pieces(row["cross_attention"], t_len, s_len)
    _assert_rows_sum_to_one_over_real_pieces(row["decoder_attention"], t_len, t_len)
    decoder = np.asarray(row["decoder_attention"])[:, :, :t_len, :t_len]
    assert np.triu(decoder, k=1).sum() == 0.0  # no query sees a later piece


def test_empty_text_gets_finite_maps(seq2seq_server):
  client, _ = seq2seq_server
  row = _attention(client, [{"text": "", "target": "", "layer": 0}])[0]
  assert row["source_length"] == 0 and row["target_length"] >= 1
  assert np.isfinite(row["cross_attention"]).all()
  assert np.asarray(row["cross_attention"]).sum() == 0.0  # no source piece to attend to


def test_classifier_maps_and_the_layer_selector(classifier_server):
  client = classifier_server
  text = "good film number 7"
  (every,) = _attention(client, [{"text": text, "layer": -1}])
  assert set(every) == {
    "source_pieces",
    "source_length",
    "encoder_attention",
    "label",
    "probabilities",
  }
  expected = client.predict(instances=[text])["predictions"][0]
  assert every["label"] == expected["label"]
  assert every["probabilities"] == pytest.approx(expected["probabilities"], abs=1e-5)
  s_len = every["source_length"]
  assert "".join(every["source_pieces"]) == text
  assert np.shape(every["encoder_attention"]) == (2, 4, s_len, s_len)
  _assert_rows_sum_to_one_over_real_pieces(every["encoder_attention"], s_len, s_len)
  rows = _attention(client, [{"text": text, "layer": 1}, {"text": "bad", "layer": 0}])
  assert np.shape(rows[0]["encoder_attention"])[:2] == (1, 4)
  np.testing.assert_allclose(
    rows[0]["encoder_attention"][0], every["encoder_attention"][1], atol=1e-5
  )
  # A row asking one layer beside one asking every layer: its layer first, then zeros (the
  # layers axis padded like the lengths; the request was refused before).
  mixed = _attention(client, [{"text": text, "layer": 1}, {"text": text, "layer": -1}])
  assert np.shape(mixed[0]["encoder_attention"])[:2] == (2, 4)
  np.testing.assert_allclose(
    mixed[0]["encoder_attention"][0], rows[0]["encoder_attention"][0], atol=1e-5
  )
  assert not np.any(mixed[0]["encoder_attention"][1])
  np.testing.assert_allclose(mixed[1]["encoder_attention"], every["encoder_attention"], atol=1e-5)
  with pytest.raises(ServingError) as error:
    _attention(client, [{"text": text, "layer": 2}])
  assert (
    error.value.status == 400 and "layer must be -1 (every layer) or 0 to 1" in error.value.message
  )


def test_a_thousand_piece_input_is_truncated_and_a_request_over_the_limit_refused(seq2seq_server):
  client, port = seq2seq_server
  body = json.dumps(
    {"signature_name": "attention", "instances": [{"text": "9" * 1000, "target": "", "layer": -1}]}
  ).encode()
  request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/models/{NAME}:predict", body)
  with urllib.request.urlopen(request, timeout=120) as response:
    answer = response.read()
  row = json.loads(answer)["predictions"][0]
  max_length, heads = 24, 4
  assert row["source_length"] == max_length  # truncated like every signature's input
  weights = sum(
    np.size(row[k]) for k in ("encoder_attention", "decoder_attention", "cross_attention")
  )
  assert weights <= 3 * heads * max_length**2
  pieces = 2 * max_length * 16  # two piece lists of at most max_length short strings
  assert len(answer) <= weights * attention_export.MAX_JSON_BYTES_PER_WEIGHT + pieces + 500
  # 700 such rows: 700 x 4 heads x 3 x 24^2 = 4.8M weights > 2^22, refused before the model runs.
  over = [{"text": "9" * 1000, "target": "nine " * 30, "layer": -1}] * 700
  with pytest.raises(ServingError) as error:
    _attention(client, over)
  assert error.value.status == 400
  assert "this request asks for 4838400 weights, more than the limit of 4194304" in (
    error.value.message
  )


def test_json_bytes_per_weight_bound_holds_for_float32():
  """The bound's arithmetic: the server writes a float32 in [0, 1] in at most 14 characters
  (9 significant digits and an exponent), 15 bytes with its comma."""
  from serving.server.tensor_json import format_predict_response

  longest = np.array([1.07979295e-05, 0.000116141506], np.float32)
  bits = np.random.default_rng(0).integers(0, 0x3F800000, 20000, dtype=np.uint32)
  for values in (longest, bits.view(np.float32)):  # any float32 bit pattern in [0, 1)
    text = format_predict_response({"w": values}, row_format=False)
    longest_text = max(len(item) for item in text[len('{"outputs": [') : -2].split(","))
    assert longest_text + 1 <= attention_export.MAX_JSON_BYTES_PER_WEIGHT
  assert longest_text == 14
