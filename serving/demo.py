"""`python -m serving.demo`: the last leg of `make run`. Starts the REST server on the exported
model, sends a predict request with the client, and prints the answers, the equivalent curl
command and the model's held-out accuracy from training."""

import json
import os
import sys

DEFAULT_TEXTS = ["4213", "19", "700005", "31337"]


def main(argv):
  from absl import flags
  flags.DEFINE_string("run_dir", "runs/default", "Training run (for its eval.json).")
  flags.DEFINE_string("model_base_path", "models/tfattn", "Exported model base path.")
  flags.DEFINE_string("model_name", "tfattn", "Model name to serve under.")
  flags.DEFINE_integer("port", 8501, "REST port (0 picks a free one).")
  flags.DEFINE_multi_string("text", DEFAULT_TEXTS, "Texts to translate.")
  flags.FLAGS(argv)
  f = flags.FLAGS
  from serving.client import ServingClient, ServingError
  from serving.server import start_subprocess

  try:
    server, port = start_subprocess(f.model_name, f.model_base_path, f.port)
  except RuntimeError as error:
    print(f"{error}\n(port {f.port} busy? try make run PORT=8502)", file=sys.stderr)
    return 1
  try:
    client = ServingClient(f.model_name, port=port)
    try:
      status = client.wait_until_available()
    except TimeoutError:
      print(f"no version under {f.model_base_path} became AVAILABLE: export one first "
            "(python -m serving.export)", file=sys.stderr)
      return 1
    print(f"\nserving {f.model_name} version {status[0]['version']} at "
          f"http://127.0.0.1:{port}/v1/models/{f.model_name}")
    body = json.dumps({"instances": f.text})
    print(f"request:  curl -s -X POST http://127.0.0.1:{port}/v1/models/{f.model_name}:predict "
          f"-d '{body}'")
    try:
      answer = client.predict(instances=f.text)
    except ServingError as error:
      print(f"request failed: {error}", file=sys.stderr)
      return 1
    print(f"response: {json.dumps(answer, ensure_ascii=False)}\n")
    for text, prediction in zip(f.text, answer["predictions"]):
      print(f"  {text:>10} -> {prediction['translation']}   (log-prob {prediction['score']:.3f})")
    eval_path = os.path.join(f.run_dir, "eval.json")
    if os.path.exists(eval_path):
      metrics = json.load(open(eval_path))
      shown = ", ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}"
                        for k, v in sorted(metrics.items()) if not k.endswith("_signature"))
      print(f"\nheld-out accuracy of this model (from training): {shown}")
      if "bleu_signature" in metrics:
        print(f"sacreBLEU signature: {metrics['bleu_signature']}")
    return 0
  finally:
    server.terminate()
    server.wait(timeout=30)


if __name__ == "__main__":
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  sys.exit(main(sys.argv))
