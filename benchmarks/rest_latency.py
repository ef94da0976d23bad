"""REST latency and throughput of `serving.server`: p50/p99 at batch 1 and 32, with and
without server-side batching, load from a second process on loopback, bounded in time.

  python benchmarks/rest_latency.py [--model_base_path models/tfattn] [--seconds 8]

Needs an exported model (`make run` makes one at models/tfattn).
"""

import argparse
import http.client
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

import common

TEXTS = ["4213", "19", "700005", "31337", "8", "123456", "99", "5000"]


def load(port, model, batch, concurrency, seconds):
  """Runs in the load-generating process: closed-loop clients, one connection each."""
  body = json.dumps({"instances": [TEXTS[i % len(TEXTS)] for i in range(batch)]})
  latencies, errors = [], []
  deadline = time.time() + seconds

  def client():
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    while time.time() < deadline:
      start = time.perf_counter()
      connection.request("POST", f"/v1/models/{model}:predict", body,
                         {"Content-Type": "application/json"})
      response = connection.getresponse()
      response.read()
      if response.status != 200:
        errors.append(response.status)
      latencies.append(time.perf_counter() - start)
    connection.close()

  threads = [threading.Thread(target=client) for _ in range(concurrency)]
  started = time.time()
  for thread in threads:
    thread.start()
  for thread in threads:
    thread.join()
  elapsed = time.time() - started
  latencies.sort()
  pick = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000
  return {"requests": len(latencies), "errors": len(errors), "p50_ms": pick(0.5),
          "p99_ms": pick(0.99), "requests_per_s": len(latencies) / elapsed,
          "rows_per_s": len(latencies) * batch / elapsed}


def start_server(base, model, batching, batching_file):
  from serving.client import ServingClient
  from serving.server import start_subprocess
  flags = ["--enable_batching", f"--batching_parameters_file={batching_file}"] if batching else []
  process, port = start_subprocess(model, os.path.abspath(base), extra_flags=flags)
  ServingClient(model, port=port).wait_until_available()
  return process, port


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--model_base_path", default="models/tfattn")
  parser.add_argument("--model", default="tfattn")
  parser.add_argument("--seconds", type=float, default=8.0)
  parser.add_argument("--concurrency", type=int, default=8)
  parser.add_argument("--load", help=argparse.SUPPRESS)  # internal: run as the load process
  args = parser.parse_args()
  if args.load:
    port, batch = map(int, args.load.split(","))
    print(json.dumps(load(port, args.model, batch, args.concurrency, args.seconds)))
    return
  if not os.path.isdir(args.model_base_path):
    sys.exit(f"{args.model_base_path} does not exist: run `make run` first")
  batching_file = os.path.join(tempfile.mkdtemp(), "batching.config")
  with open(batching_file, "w") as f:
    f.write("max_batch_size { value: 64 }\nbatch_timeout_micros { value: 2000 }\n"
            "num_batch_threads { value: 2 }\nmax_enqueued_batches { value: 100 }\n")
  print(f"device: {common.device_description()}; model at {args.model_base_path}; "
        f"{args.concurrency} concurrent clients in a second process, {args.seconds:.0f} s each")
  print(f"{'batching':<9} {'batch':>5} {'req/s':>8} {'rows/s':>8} {'p50 ms':>8} {'p99 ms':>8} "
        f"{'errors':>6}")
  results = {}
  for batching in (False, True):
    process, port = start_server(args.model_base_path, args.model, batching, batching_file)
    try:
      for batch in (1, 32):
        out = subprocess.run([sys.executable, os.path.abspath(__file__), f"--load={port},{batch}",
                              f"--model={args.model}", f"--seconds={args.seconds}",
                              f"--concurrency={args.concurrency}"], capture_output=True,
                             text=True, timeout=args.seconds * 10 + 60, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        results[batching, batch] = r
        print(f"{'on' if batching else 'off':<9} {batch:>5} {r['requests_per_s']:8.1f} "
              f"{r['rows_per_s']:8.1f} {r['p50_ms']:8.1f} {r['p99_ms']:8.1f} {r['errors']:>6}")
    finally:
      process.terminate()
      process.wait(timeout=30)
  for batch in (1, 32):
    on, off = results[True, batch], results[False, batch]
    print(f"batch {batch}: batching on/off rows/s {on['rows_per_s']:.1f} / "
          f"{off['rows_per_s']:.1f} = {on['rows_per_s'] / off['rows_per_s']:.2f}x; p50 "
          f"{on['p50_ms']:.1f} / {off['p50_ms']:.1f} ms = {on['p50_ms'] / off['p50_ms']:.2f}x")


if __name__ == "__main__":
  main()
