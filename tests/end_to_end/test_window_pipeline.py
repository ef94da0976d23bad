"""A windowed language model (`attention_window`) end to end, tiny and short: it trains, resumes,
evaluates, exports with its setting, passes serving.export.check, maps its attention as a band (the
signature's weights, and the picture `python -m serving.tools.attention_maps` draws of them), and
generates over REST and gRPC what the export generates in-process."""

import json
import math
import os
import subprocess
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

import warm_start
from train_helpers import REPO, environment, logged_steps, tiny_text_run

pytestmark = pytest.mark.slow  # trains, exports and serves

WINDOW = 2


def test_a_windowed_language_model_trains_resumes_exports_and_serves(tmp_path):
  config = tiny_text_run(
    tmp_path,
    train_steps=4,
    warmup_steps=2,
    log_every=2,
    checkpoint_every=4,
    attention_window=WINDOW,
    decode=dict(strategy="greedy", max_decode_length=12),
  )
  Trainer(*prepare(config)).run()
  with open(os.path.join(config.run_dir, "model_config.json")) as f:
    assert json.load(f)["attention_window"] == WINDOW
  metrics = Trainer(*prepare(config.replace(train_steps=6))).run()
  assert [entry["step"] for entry in logged_steps(config.run_dir)] == [2, 4, 6]  # resumed at 4
  assert math.isfinite(metrics["validation"]["perplexity"])

  path = export.export(config.run_dir, str(tmp_path / "models"), decode="xla")
  assert check.problems(path) == []
  with open(os.path.join(path, "assets.extra", "tfattn.json")) as f:
    assert json.load(f)["model_config"]["attention_window"] == WINDOW
  loaded = tf.saved_model.load(path)
  text = "the cat sees the dog and the cat runs"
  maps = loaded.signatures["attention"](text=tf.constant([text]), layer=tf.constant([0]))
  weights = maps["decoder_attention"].numpy()[0, 0]  # [heads, length, length]
  length = int(maps["source_length"][0])
  distance = np.arange(length)[:, None] - np.arange(length)[None]
  assert (weights[:, :length, :length][:, (distance < 0) | (distance > WINDOW)] == 0).all()
  assert (weights[:, :length, :length][:, distance == WINDOW] > 0).any()
  # The picture command draws a language model's only attention, and refuses another in a line.
  drawn, refused = (
    subprocess.run(
      [
        *warm_start.python(),
        "-m",
        "serving.tools.attention_maps",
        f"--model_base_path={path}",
        *more,
      ],
      cwd=REPO,
      env=environment(),
      capture_output=True,
      text=True,
      timeout=300,
    )
    for more in (
      [f"--text={text}", f"--out={tmp_path / 'map.png'}"],
      [f"--text={text}", f"--out={tmp_path / 'cross.png'}", "--kind=cross"],
    )
  )
  assert drawn.returncode == 0, drawn.stderr[-2000:]
  assert "decoder self-attention" in drawn.stdout
  image = tf.io.decode_png((tmp_path / "map.png").read_bytes()).numpy()
  assert image.std() > 20  # drawn, not blank
  assert refused.returncode == 2 and refused.stderr.strip().splitlines() == [
    "serving.tools.attention_maps: error: --kind=cross: this model is a language model; its "
    "only attention is --kind=decoder"
  ]
  assert not (tmp_path / "cross.png").exists()
  # Twelve tokens from a short prompt: the ring of WINDOW + 1 slots turns several times.
  generated = loaded.signatures["generate"](text=tf.constant(["the cat"]))["generation"]

  manager = ModelManager("lm", str(tmp_path / "models"))
  core = ServerCore([manager])
  core.start()
  grpc_server, ports = grpc_service.make_server(core, ["127.0.0.1:0"], 2)
  rest = make_server(core, "127.0.0.1", 0)
  threading.Thread(target=rest.serve_forever, daemon=True).start()
  try:
    over_rest = ServingClient("lm", port=rest.server_address[1]).predict(
      instances=[{"text": "the cat"}], signature_name="generate"
    )["predictions"]
    grpc_client = GrpcServingClient("lm", port=ports["127.0.0.1:0"])
    over_grpc = grpc_client.predict({"text": np.array([b"the cat"])}, "generate")
    grpc_client.close()
  finally:
    rest.shutdown(0)
    grpc_server.stop(0).wait()
    core.stop()
  expected = generated.numpy()[0].decode()
  assert over_rest[0]["generation"] == expected
  assert over_grpc["generation"][0].decode() == expected
