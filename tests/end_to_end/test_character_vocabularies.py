"""A character vocabulary end to end: `--tokenizer=char` -> a tiny language model (a few steps)
-> export -> answers over REST, and loads in a TF program that has neither tfattn nor TF-Text
(the tokenizer is TF core ops). The byte tokenizer's SavedModel round trip and ops are tested
in tests/tfattn/test_text.py."""

import json
import threading

import pytest
import tensorflow as tf

from serving import export
from serving.export import check
from serving.server.model_manager import ModelManager
from serving.server.rest_api import make_server
from serving.server.server_core import ServerCore
from serving.tools.client import ServingClient
from tfattn import text
from tfattn.support.run_dir import RunDir
from train.trainer import Trainer, prepare

from train_helpers import run_without_tfattn, tiny_text_run

pytestmark = pytest.mark.slow  # trains, exports and serves

# The characters of tiny_text_run's sentences and the newlines between them (packed text keeps
# them): the character vocabulary holds each once.
_SENTENCES = "the cat sees dog bird fish and runs\n"

_WITHOUT_TF_TEXT = """
import json, sys
import tensorflow as tf
model = tf.saved_model.load(sys.argv[1])
out = model.signatures["generate"](text=tf.constant(sys.argv[2:]))
print("RESULT " + json.dumps([t.decode() for t in out["generation"].numpy()]))
"""


def test_a_character_language_model_exports_and_answers_over_rest(tmp_path):
  config = tiny_text_run(
    tmp_path,
    tokenizer="char",
    train_steps=4,
    warmup_steps=1,
    checkpoint_every=4,
    decode=dict(strategy="greedy", max_decode_length=6),
  )
  Trainer(*prepare(config)).run()
  layout = RunDir(config.run_dir)
  assert (tmp_path / "run" / "vocab" / "source.chars").exists()
  with open(layout.model_config) as f:
    assert json.load(f)["target_vocab_size"] == len(text.RESERVED_TOKENS) + len(set(_SENTENCES))

  path = export.export(config.run_dir, str(tmp_path / "models"), decode="graph")
  assert check.problems(path) == []  # every op is one TF Serving links
  loaded = tf.saved_model.load(path)
  prompts = ["the cat sees", "the dog\truns"]  # a tab is no training character: [UNK]
  expected = [
    t.decode()
    for t in loaded.signatures["generate"](text=tf.constant(prompts))["generation"].numpy()
  ]
  pieces = loaded.signatures["attention"](text=tf.constant(prompts[:1]), layer=tf.constant([-1]))
  assert [p.decode() for p in pieces["source_pieces"][0, :4].numpy()] == ["[START]", "t", "h", "e"]

  manager = ModelManager("lm", str(tmp_path / "models"))
  core = ServerCore([manager])
  core.start()
  rest = make_server(core, "127.0.0.1", 0)
  threading.Thread(target=rest.serve_forever, daemon=True).start()
  try:
    answers = ServingClient("lm", port=rest.server_address[1]).predict(
      instances=[{"text": p} for p in prompts], signature_name="generate"
    )["predictions"]
  finally:
    rest.shutdown(0)
    core.stop()
  assert [a["generation"] for a in answers] == expected
  assert run_without_tfattn(_WITHOUT_TF_TEXT, path, *prompts) == expected
