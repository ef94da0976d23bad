"""`python -m serving.tools.demo`: the last leg of `make run`. Starts the REST server on the
exported model, sends a predict request with the client, and prints the answers, the equivalent curl
command and the model's held-out accuracy from training."""

import cli

import dataclasses
import json
import os
import socket
from typing import List

from absl import flags

from serving import export
from serving.server import launch
from serving.tf_serving import xla_compilation
from serving.tools.client import ServingClient, ServingError
from settings import setting

DEFAULT_TEXTS = ["4213", "19", "700005", "31337"]
FLAGS = flags.FLAGS


@dataclasses.dataclass(frozen=True)
class DemoFlags:
  """The flags of `python -m serving.tools.demo`."""

  run_dir: str = setting("runs/default", "Training run (for its eval.json).")
  model_base_path: str = setting("models/tfattn", "Exported model base path.")
  model_name: str = setting("tfattn", "Model name to serve under.")
  port: int = setting(8501, "REST port (0 picks a free one).", minimum=0, maximum=65535)
  text: List[str] = setting(tuple(DEFAULT_TEXTS), "Texts to translate.", repeat=True)
  preflight: bool = setting(
    False, "Only check that --port is free, and exit (make run does this before it trains)."
  )


def _define_flags():
  cli.define_flags(DemoFlags)


def _check_port_free(port):
  """A busy port is the user's mistake, found before anything trains or loads."""
  if port == 0:
    return
  with socket.socket() as sock:
    try:
      sock.bind(("127.0.0.1", port))
    except OSError:
      raise cli.UsageError(
        f"port {port} is busy (something else listens there): pick another, e.g. "
        f"make run PORT={port + 1}, or python -m serving.tools.demo --port={port + 1}"
      ) from None


def _xla_flags(base_path):
  """The server flag an XLA export needs (tensorflow_model_server needs it too)."""
  if not export.is_xla_export(base_path):
    return []
  print(
    f"XLA export: serving it with {xla_compilation.CPU_FLAG} ({xla_compilation.TF_SERVING_NEEDS})"
  )
  return [xla_compilation.CPU_FLAG]


def _start_server():
  """(process, REST port) of a server child; its one-line error if it could not start."""
  try:
    process, ports = launch.start_subprocess(
      FLAGS.model_name,
      FLAGS.model_base_path,
      rest_port=FLAGS.port,
      extra_flags=_xla_flags(FLAGS.model_base_path),
    )
    return process, ports.rest
  except RuntimeError as error:
    lines = [line for line in str(error).splitlines() if "error:" in line]
    reason = lines[-1].split("error:", 1)[1].strip() if lines else str(error)[-500:]
    if getattr(error, "returncode", None) == 2:  # a usage mistake: say it as the server did
      raise cli.UsageError(reason) from None
    raise cli.RunError(f"the server did not start: {reason}") from None


def _print_evaluation(path):
  """The model's held-out numbers from training (eval.json): validation, and test if judged."""
  if not os.path.exists(path):
    return
  with open(path) as file:
    result = json.load(file)
  for role in ("validation", "test"):
    metrics = result.get(role)
    if not metrics:
      continue
    shown = ", ".join(
      f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}"
      for k, v in sorted(metrics.items())
      if not k.endswith("_signature") and not isinstance(v, dict)
    )
    print(
      f"\n{role} numbers of this model (from training, {result['weights']['chosen_by']} "
      f"weights of step {result['step']}): {shown}"
    )
  signature = (result.get("test") or result.get("validation") or {}).get("bleu_signature")
  if signature:
    print(f"sacreBLEU signature: {signature}")


def main(argv):
  f = FLAGS
  _check_port_free(f.port)
  if f.preflight:
    return 0
  process, port = _start_server()
  try:
    client = ServingClient(f.model_name, port=port)
    try:
      status = client.wait_until_available()
    except TimeoutError:
      raise cli.RunError(
        f"no version under {f.model_base_path} became AVAILABLE: export one "
        "first (python -m serving.export)"
      ) from None
    print(
      f"\nserving {f.model_name} version {status[0]['version']} at "
      f"http://127.0.0.1:{port}/v1/models/{f.model_name}"
    )
    body = json.dumps({"instances": f.text})
    print(
      f"request:  curl -s -X POST http://127.0.0.1:{port}/v1/models/{f.model_name}:predict "
      f"-d '{body}'"
    )
    try:
      answer = client.predict(instances=f.text)
    except ServingError as error:
      raise cli.RunError(f"request failed: {error}") from None
    print(f"response: {json.dumps(answer, ensure_ascii=False)}\n")
    for text, prediction in zip(f.text, answer["predictions"]):
      print(f"  {text:>10} -> {prediction['translation']}   (score {prediction['score']:.3f})")
    _print_evaluation(os.path.join(f.run_dir, "eval.json"))  # RunDir would import TensorFlow
    return 0
  finally:
    launch.stop(process)


if __name__ == "__main__":
  _define_flags()
  cli.run(main)
