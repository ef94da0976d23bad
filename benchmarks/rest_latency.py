"""REST latency and throughput of `serving.server`: p50/p99 at batch 1 and 32, with and
without server-side batching, load from a second process on loopback, bounded in time. With
--run_dir, the run is exported twice (graph and XLA decoding) and both are measured in one run.

  python benchmarks/rest_latency.py [--model_base_path models/tfattn] [--seconds 8]
  python benchmarks/rest_latency.py --run_dir runs/default [--texts_file FILE]

Needs an exported model (`make run` makes one at models/tfattn) or a run directory.
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
# Server-side batching pads merged batches to these sizes, so an XLA export compiles (and warms
# up) a bounded set of programs; the largest is max_batch_size.
ALLOWED_BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64)


def load(port, model, batch, concurrency, seconds, texts):
  """Runs in the load-generating process: closed-loop clients, one connection each, each
  request the next `batch` texts."""
  bodies = [json.dumps({"instances": [texts[(start + i) % len(texts)] for i in range(batch)]})
            for start in range(0, len(texts), batch)]
  latencies, errors = [], []
  deadline = time.time() + seconds

  def client(offset):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    sent = offset
    while time.time() < deadline:
      body = bodies[sent % len(bodies)]
      sent += 1
      start = time.perf_counter()
      connection.request("POST", f"/v1/models/{model}:predict", body,
                         {"Content-Type": "application/json"})
      response = connection.getresponse()
      response.read()
      if response.status != 200:
        errors.append(response.status)
      latencies.append(time.perf_counter() - start)
    connection.close()

  threads = [threading.Thread(target=client, args=(n,)) for n in range(concurrency)]
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


def measure(base, args, batching_file, label):
  """{(batching, batch): load results} of the model at `base`, one table row each."""
  results = {}
  for batching in (False, True):
    process, port = start_server(base, args.model, batching, batching_file)
    try:
      for batch in (1, 32):
        command = [sys.executable, os.path.abspath(__file__), f"--load={port},{batch}",
                   f"--model={args.model}", f"--seconds={args.seconds}",
                   f"--concurrency={args.concurrency}"]
        if args.texts_file:
          command.append(f"--texts_file={args.texts_file}")
        out = subprocess.run(command, capture_output=True, text=True,
                             timeout=args.seconds * 10 + 120, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        results[batching, batch] = r
        print(f"{label:<7} {'on' if batching else 'off':<9} {batch:>5} "
              f"{r['requests_per_s']:8.1f} {r['rows_per_s']:8.1f} {r['p50_ms']:8.1f} "
              f"{r['p99_ms']:8.1f} {r['errors']:>6}")
    finally:
      process.terminate()
      process.wait(timeout=30)
  return results


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--model_base_path", default="models/tfattn")
  parser.add_argument("--run_dir", help="export this run with graph and with XLA decoding and "
                      "compare the two (instead of --model_base_path)")
  parser.add_argument("--beam", type=int, default=4, help="--run_dir: export beam size")
  parser.add_argument("--texts_file", help="request texts, one a line (TSV: the first column); "
                      "default: numbers for the built-in task")
  parser.add_argument("--model", default="tfattn")
  parser.add_argument("--seconds", type=float, default=8.0)
  parser.add_argument("--concurrency", type=int, default=8)
  parser.add_argument("--load", help=argparse.SUPPRESS)  # internal: run as the load process
  args = parser.parse_args()
  if args.load:
    port, batch = map(int, args.load.split(","))
    print(json.dumps(load(port, args.model, batch, args.concurrency, args.seconds,
                          common.read_texts(args.texts_file) if args.texts_file else TEXTS)))
    return
  if args.run_dir:
    from serving import export
    temp = tempfile.mkdtemp(prefix="rest-latency-")
    bases = {}
    for mode in ("graph", "xla"):
      bases[mode] = os.path.join(temp, mode)
      export.export(args.run_dir, bases[mode], beam_size=args.beam, decode=mode,
                    model_name=args.model, warmup_batch_sizes=(1,) + ALLOWED_BATCH_SIZES)
  elif os.path.isdir(args.model_base_path):
    bases = {"model": args.model_base_path}
  else:
    sys.exit(f"{args.model_base_path} does not exist: run `make run` first, or pass --run_dir")
  batching_file = os.path.join(tempfile.mkdtemp(), "batching.config")
  with open(batching_file, "w") as f:
    f.write("max_batch_size { value: 64 }\nbatch_timeout_micros { value: 2000 }\n"
            "num_batch_threads { value: 2 }\nmax_enqueued_batches { value: 100 }\n" +
            "".join(f"allowed_batch_sizes: {size}\n" for size in ALLOWED_BATCH_SIZES))
  print(f"device: {common.device_description()}; {', '.join(bases.values())}; "
        f"{args.concurrency} concurrent clients in a second process, {args.seconds:.0f} s each")
  print(f"{'model':<7} {'batching':<9} {'batch':>5} {'req/s':>8} {'rows/s':>8} {'p50 ms':>8} "
        f"{'p99 ms':>8} {'errors':>6}")
  results = {label: measure(base, args, batching_file, label) for label, base in bases.items()}
  for label, result in results.items():
    for batch in (1, 32):
      on, off = result[True, batch], result[False, batch]
      print(f"{label} batch {batch}: batching on/off rows/s {on['rows_per_s']:.1f} / "
            f"{off['rows_per_s']:.1f} = {on['rows_per_s'] / off['rows_per_s']:.2f}x; p50 "
            f"{on['p50_ms']:.1f} / {off['p50_ms']:.1f} ms = {on['p50_ms'] / off['p50_ms']:.2f}x")
  if "xla" in results:
    for (batching, batch), graph in results["graph"].items():
      xla = results["xla"][batching, batch]
      print(f"XLA vs graph, batching {'on' if batching else 'off'}, batch {batch}: p50 "
            f"{graph['p50_ms'] / xla['p50_ms']:.2f}x lower, p99 "
            f"{graph['p99_ms'] / xla['p99_ms']:.2f}x lower, rows/s "
            f"{xla['rows_per_s'] / graph['rows_per_s']:.2f}x")


if __name__ == "__main__":
  main()
