"""The language model end to end, tiny and short: a one-column text file -> Trainer (a few
steps) -> perplexity and nats per character on validation and test -> export -> generate and
score in-process, over REST and gRPC, and from another TF program that has no tfattn."""

import json
import math
import threading

import numpy as np
import pytest
import tensorflow as tf

from serving import export
from serving.export import check
from serving.server import grpc_service
from serving.server.model_manager import ModelManager
from serving.server.rest_api import make_server
from serving.server.server_core import ServerCore
from serving.tools.client import GrpcServingClient, ServingClient
from train.trainer import Trainer, prepare

from train_helpers import run_without_tfattn, tiny_text_run

pytestmark = pytest.mark.slow  # trains, exports and serves

_ISOLATED = """
import json, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401  the tokenizer's ops
model = tf.saved_model.load(sys.argv[1])
out = model.signatures["generate"](text=tf.constant(["the cat sees", ""]))
print("RESULT " + json.dumps({
  "generation": [t.decode() for t in out["generation"].numpy()],
  "call": [t.decode() for t in model(tf.constant(["the cat sees", ""])).numpy()],
}))
"""


def test_a_tiny_language_model_trains_exports_serves_and_generates(tmp_path):
  config = tiny_text_run(
    tmp_path,
    text_packing="lines",  # one example a line (tests/end_to_end/test_packed_language_model.py)
    train_steps=30,
    warmup_steps=2,
    log_every=10,
    checkpoint_every=30,
    decode=dict(strategy="beam", beam_size=2, max_decode_length=5),
  )
  metrics = Trainer(*prepare(config)).run()
  # A model that learned something: well below the uniform guess's perplexity (the vocabulary
  # size, 20 pieces here). Measured: 10.8 after 30 steps; 30.6 after 6 (worse than uniform).
  vocab = json.loads((tmp_path / "run" / "model_config.json").read_text())["target_vocab_size"]
  for role, count in (("validation", 6), ("test", 4)):
    judged = metrics[role]
    assert judged["examples"] == count and judged["tokens"] > count
    assert 1.0 < judged["perplexity"] < 0.75 * vocab and math.isfinite(judged["perplexity"])
    # The same likelihood per character: the texts' characters and one newline each.
    assert judged["characters"] >= judged["tokens"] and judged["partial"] is False
    per_token = math.log(judged["perplexity"])
    assert judged["nats_per_char"] == pytest.approx(
      per_token * judged["tokens"] / judged["characters"], rel=1e-6
    )

  path = export.export(config.run_dir, str(tmp_path / "models"), decode="graph")
  assert check.problems(path) == []
  loaded = tf.saved_model.load(path)
  assert {
    "serving_default",
    "generate",
    "generate_up_to",
    "generate_nbest",
    "generate_ids",
    "attention",
    "score",
  } == set(loaded.signatures)
  prompts = tf.constant(["the cat sees", "", "the dog"])
  generated = loaded.signatures["generate"](text=prompts)
  assert generated["generation"].shape == (3,) and generated["log_prob"].shape == (3,)
  nbest = loaded.signatures["generate_nbest"](text=prompts)
  assert nbest["generation"].shape == (3, 2)
  np.testing.assert_array_equal(nbest["generation"][:, 0], generated["generation"])
  assert (np.diff(nbest["score"].numpy(), axis=1) <= 1e-6).all()
  maps = loaded.signatures["attention"](text=prompts, layer=tf.constant([-1, -1, -1]))
  assert maps["decoder_attention"].shape[:3] == (3, 1, 4)
  assert maps["source_pieces"][0, 0].numpy() == b"[START]"
  assert list(maps["source_length"].numpy()[1:2]) == [1]  # "" is START alone

  manager = ModelManager("lm", str(tmp_path / "models"))
  core = ServerCore([manager])
  core.start()
  grpc_server, ports = grpc_service.make_server(core, ["127.0.0.1:0"], 2)
  rest = make_server(core, "127.0.0.1", 0)
  threading.Thread(target=rest.serve_forever, daemon=True).start()
  try:
    over_rest = ServingClient("lm", port=rest.server_address[1]).predict(
      instances=[{"text": "the cat sees"}], signature_name="generate"
    )["predictions"]
    scored_over_rest = ServingClient("lm", port=rest.server_address[1]).predict(
      instances=[{"text": "the cat sees"}, {"text": "the dog runs"}], signature_name="score"
    )["predictions"]
    # A length per row, in one request: the client's rows, then gRPC's columns.
    up_to_rows = [{"text": "the cat sees", "max_new_tokens": 1}, {"text": "", "max_new_tokens": 9}]
    up_to_over_rest = ServingClient("lm", port=rest.server_address[1]).predict(
      instances=up_to_rows, signature_name="generate_up_to"
    )["predictions"]
    grpc_client = GrpcServingClient("lm", port=ports["127.0.0.1:0"])
    over_grpc = grpc_client.predict({"text": np.array([b"the cat sees"])}, "generate")
    scored_over_grpc = grpc_client.predict(
      {"text": np.array([b"the cat sees", b"the dog runs"])}, "score"
    )
    up_to_over_grpc = grpc_client.predict(
      {"text": np.array([b"the cat sees", b""]), "max_new_tokens": np.array([1, 9], np.int32)},
      "generate_up_to",
    )
    grpc_client.close()
  finally:
    rest.shutdown(0)
    grpc_server.stop(0).wait()
    core.stop()
  expected = generated["generation"].numpy()[0].decode()
  assert over_rest[0]["generation"] == expected
  assert over_grpc["generation"][0].decode() == expected
  scored = loaded.signatures["score"](text=tf.constant(["the cat sees", "the dog runs"]))
  np.testing.assert_allclose(
    [row["log_prob"] for row in scored_over_rest], scored["log_prob"], rtol=1e-5
  )
  np.testing.assert_allclose(scored_over_grpc["log_prob"], scored["log_prob"], rtol=1e-5)
  assert [row["tokens"] for row in scored_over_rest] == list(scored_over_grpc["tokens"])
  assert scored_over_grpc["token_log_probs"].shape == scored["token_log_probs"].shape

  up_to = loaded.signatures["generate_up_to"](
    text=tf.constant(["the cat sees", ""]), max_new_tokens=tf.constant([1, 9])
  )
  assert [row["generation"] for row in up_to_over_rest] == [
    t.decode() for t in up_to["generation"].numpy()
  ]
  np.testing.assert_array_equal(up_to_over_grpc["generation"], up_to["generation"])
  np.testing.assert_allclose(up_to_over_grpc["log_prob"], up_to["log_prob"], rtol=1e-5)

  other = run_without_tfattn(_ISOLATED, path)
  assert other["generation"][0] == expected and other["call"] == other["generation"]


@pytest.mark.parametrize("form", ["text_file", "tfrecord"])
def test_a_tsv_language_model_trains_exports_and_generates_from_each_input_form(tmp_path, form):
  """`--task=tsv --tsv_kind=language_model`: a one-column text file (a line is a text, a TAB
  inside it is text) or TFRecords of a `text` feature. It failed at the start (batch_size None:
  the kind had no TSV defaults) and a one-column file asked for 2 tab-separated fields."""
  config = tiny_text_run(tmp_path, train_steps=2, log_every=1, eval_examples=4)
  with open(config.data.train_file, encoding="utf-8") as f:
    texts = [line.rstrip("\n") for line in f][:16]
  texts[0] = "the cat\tsees the dog"  # one text, its TAB kept
  if form == "tfrecord":
    train_file = str(tmp_path / "train.tfrecord")
    with tf.io.TFRecordWriter(train_file) as writer:
      for line in texts:
        feature = tf.train.Feature(bytes_list=tf.train.BytesList(value=[line.encode()]))
        example = tf.train.Example(features=tf.train.Features(feature={"text": feature}))
        writer.write(example.SerializeToString())
  else:
    train_file = str(tmp_path / "train.tsv")
    with open(train_file, "w", encoding="utf-8") as f:
      f.write("".join(line + "\n" for line in texts))
  config = config.replace(task="tsv", tsv_kind="language_model", train_file=train_file)
  prepared = prepare(config)
  resolved, task = prepared[:2]
  assert resolved.data.batch_size == 8 and resolved.decode["strategy"] == "greedy"
  read = list(task.train().as_numpy_iterator())
  assert sorted(text.decode() for text, _ in read) == sorted(texts)
  assert {target for _, target in read} == {b""}
  metrics = Trainer(*prepared).run()
  assert metrics["step"] == 2 and metrics["validation"]["tokens"] > 0
  path = export.export(config.run_dir, str(tmp_path / "models"))
  generated = tf.saved_model.load(path).signatures["generate"](text=tf.constant(["the cat", ""]))
  assert generated["generation"].shape == (2,)
