"""REST and gRPC latency and throughput of `serving.server`: p50/p99 at batch 1 and 32, with
and without server-side batching, over each protocol (--protocols), load from a second process
on loopback, bounded in time. With --run_dir, the run is exported twice (graph and XLA
decoding) and both are measured in one run.

  python benchmarks/rest_latency.py [--model_base_path=models/tfattn] [--seconds=8]
  python benchmarks/rest_latency.py --run_dir=runs/default [--texts_file=FILE]
  python benchmarks/rest_latency.py --servers=new,old --old_ref=ae5f38d   # before/after
  python benchmarks/rest_latency.py --echo_model --servers=new,old,cheroot,tornado \
      --candidates_path=DIR --rounds=3 --seconds=4    # the HTTP stacks alone

--servers compares HTTP stacks on the same model, run one after another in one invocation:
`new` is this tree's `python -m serving.server` (waitress); `old` is `python -m serving.server`
from the git commit --old_ref (extracted to a temporary directory; before issue 13 it was
http.server's ThreadingHTTPServer); `cheroot` and `tornado` host this tree's WSGI app (the
same RestApp) on those libraries, imported from --candidates_path (they are not requirements:
`pip install --target DIR cheroot tornado`), to compare candidate libraries.

Needs an exported model (`make run` makes one at models/tfattn) or a run directory.
"""

import cli
import common

import dataclasses
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import types
from typing import List, Optional

from serving import export
from serving.server import launch
from serving.tf_serving import xla_compilation
from settings import setting

TEXTS = ["4213", "19", "700005", "31337", "8", "123456", "99", "5000"]
# Server-side batching pads merged batches to these sizes, so an XLA export compiles (and warms
# up) a bounded set of programs; the largest is max_batch_size.
ALLOWED_BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64)


def load(protocol, port, model, batch, concurrency, seconds, texts):
  """Runs in the load-generating process: closed-loop clients, one connection each, each
  request the next `batch` texts, as REST JSON or as a gRPC PredictRequest."""
  rows = [
    [texts[(start + i) % len(texts)] for i in range(batch)] for start in range(0, len(texts), batch)
  ]
  latencies, errors = [], []
  deadline = time.time() + seconds
  send = _grpc_sender(port, model, rows) if protocol == "grpc" else _rest_sender(port, model, rows)

  def client(offset):
    request, close = send()
    sent = offset
    while time.time() < deadline:
      start = time.perf_counter()
      error = request(sent % len(rows))
      sent += 1
      if error is not None:
        errors.append(error)
      latencies.append(time.perf_counter() - start)
    close()

  threads = [threading.Thread(target=client, args=(n,)) for n in range(concurrency)]
  started = time.time()
  for thread in threads:
    thread.start()
  for thread in threads:
    thread.join()
  elapsed = time.time() - started
  latencies.sort()

  def pick(q):  # the q-quantile in milliseconds
    return latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000

  return {
    "requests": len(latencies),
    "errors": len(errors),
    "p50_ms": pick(0.5),
    "p99_ms": pick(0.99),
    "requests_per_s": len(latencies) / elapsed,
    "rows_per_s": len(latencies) * batch / elapsed,
  }


def _rest_sender(port, model, rows):
  """A factory of (request(i) -> error or None, close) pairs, one HTTP connection each."""
  bodies = [json.dumps({"instances": row}) for row in rows]

  def connect():
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)

    def request(i):
      connection.request(
        "POST", f"/v1/models/{model}:predict", bodies[i], {"Content-Type": "application/json"}
      )
      response = connection.getresponse()
      response.read()
      return None if response.status == 200 else response.status

    return request, connection.close

  return connect


def _grpc_sender(port, model, rows):
  """The same over gRPC: one channel per client, PredictRequests built once."""
  import grpc
  import tensorflow as tf
  from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

  requests = []
  for row in rows:
    request = predict_pb2.PredictRequest()
    request.model_spec.name = model
    request.inputs["text"].CopyFrom(tf.make_tensor_proto(row))
    requests.append(request)

  def connect():
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)

    def request(i):
      try:
        stub.Predict(requests[i], timeout=120)
      except grpc.RpcError as error:
        return error.code().name
      return None

    return request, channel.close

  return connect


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SERVER_THREADS = 8  # serving.server's default on this 2-core machine (4 x CPUs)


def extract_tree(ref):
  """A temporary directory holding the repository's files at git commit `ref`."""
  directory = tempfile.mkdtemp(prefix="rest-latency-old-")
  archive = subprocess.run(["git", "archive", ref], cwd=REPO, capture_output=True, check=True)
  subprocess.run(["tar", "-x", "-C", directory], input=archive.stdout, check=True)
  return directory


def start_server(kind, base, model, batching_file, args):
  """(process, launch.Ports) of a started server whose model is AVAILABLE: `new` and `old` are
  `python -m serving.server` of this tree or of --old_ref's (started by serving.server.launch), the
  others this tree's RestApp hosted by a candidate library."""
  from serving.tools.client import ServingClient

  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  base = os.path.abspath(base)
  if kind in ("new", "old"):
    flags = ["--enable_batching", f"--batching_parameters_file={batching_file}"] * bool(
      batching_file
    )
    if kind == "new" and export.is_xla_export(base):  # as tensorflow_model_server needs it
      flags.append(xla_compilation.CPU_FLAG)
    process, ports = launch.start_subprocess(
      model,
      base,
      grpc_port=0 if kind == "new" else None,
      extra_flags=flags,
      timeout=300,
      cwd=args.old_tree if kind == "old" else REPO,
      env=env,
    )
  else:
    process, ports = _start_candidate(kind, base, model, batching_file, args, env)
  try:
    ServingClient(model, port=ports.rest).wait_until_available()
  except BaseException:
    process.kill()
    raise
  return process, ports


def _start_candidate(kind, base, model, batching_file, args, env):
  work_dir = tempfile.mkdtemp(prefix="rest-latency-")
  port_file = os.path.join(work_dir, "port")
  env["PYTHONPATH"] = os.pathsep.join([args.candidates_path, REPO])
  command = [
    sys.executable,
    os.path.abspath(__file__),
    f"--host_app={kind}",
    f"--model_base_path={base}",
    f"--model={model}",
    f"--port_file={port_file}",
  ]
  if batching_file:
    command.append(f"--batching_file={batching_file}")
  process = subprocess.Popen(
    command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
  )
  try:
    deadline = time.time() + 300
    while not os.path.exists(port_file):
      if process.poll() is not None or time.time() > deadline:
        process.kill()
        raise RuntimeError(f"server {kind} did not start: {' '.join(command)}")
      time.sleep(0.2)
    with open(port_file) as f:
      return process, launch.Ports(int(f.read()), None)
  finally:
    shutil.rmtree(work_dir, ignore_errors=True)


def host_app(stack, base, model, port_file, batching_file):
  """Runs in a server process: this tree's RestApp on a candidate HTTP library."""
  from serving.server.batching import Batcher, BatchingParameters
  from serving.server.model_manager import ModelManager
  from serving.server.rest_api import RestApp
  from serving.server.server_core import ServerCore

  batcher = None
  if batching_file:
    with open(batching_file) as f:
      batcher = Batcher(BatchingParameters.from_text_proto(f.read()))
  core = ServerCore([ModelManager(model, base)], batcher=batcher)
  core.start()
  app = RestApp(core)
  if stack == "cheroot":
    from cheroot import wsgi

    server = wsgi.Server(("127.0.0.1", 0), app, numthreads=SERVER_THREADS)
    server.prepare()
    _write_port(port_file, server.bind_addr[1])
    server.serve()
  elif stack == "tornado":
    import concurrent.futures

    from tornado import httpserver, ioloop, netutil, wsgi

    pool = concurrent.futures.ThreadPoolExecutor(SERVER_THREADS)
    sockets = netutil.bind_sockets(0, "127.0.0.1")
    httpserver.HTTPServer(wsgi.WSGIContainer(app, executor=pool)).add_sockets(sockets)
    _write_port(port_file, sockets[0].getsockname()[1])
    ioloop.IOLoop.current().start()
  else:
    raise ValueError(f"unknown stack {stack}")


def _write_port(path, port):
  with open(path + ".tmp", "w") as f:
    f.write(str(port))
  os.replace(path + ".tmp", path)


def measure(base, args, batching_file, label, kind="new", protocol="rest"):
  """{(batching, batch): load results} of the model at `base` over `protocol`, one table row
  each."""
  results = {}
  for batching in (False, True):
    process, ports = start_server(kind, base, args.model, batching_file if batching else None, args)
    port = ports.grpc if protocol == "grpc" else ports.rest
    try:
      for batch in (1, 32):
        command = [
          sys.executable,
          os.path.abspath(__file__),
          f"--load={protocol},{port},{batch}",
          f"--model={args.model}",
          f"--seconds={args.seconds}",
          f"--concurrency={args.concurrency}",
        ]
        if args.texts_file:
          command.append(f"--texts_file={args.texts_file}")
        out = subprocess.run(
          command, capture_output=True, text=True, timeout=args.seconds * 10 + 120, check=True
        )
        r = json.loads(out.stdout.strip().splitlines()[-1])
        results[batching, batch] = r
        print(
          f"{label:<15} {'on' if batching else 'off':<9} {batch:>5} "
          f"{r['requests_per_s']:8.1f} {r['rows_per_s']:8.1f} {r['p50_ms']:8.1f} "
          f"{r['p99_ms']:8.1f} {r['errors']:>6}"
        )
    finally:
      launch.stop(process)
  return results


@dataclasses.dataclass(frozen=True)
class RestLatencyFlags:
  """The flags of `benchmarks/rest_latency.py`."""

  model_base_path: str = setting("models/tfattn", "The export to serve.")
  run_dir: Optional[str] = setting(
    None,
    "Export this run with graph and with XLA decoding and compare the two "
    "(instead of --model_base_path).",
  )
  beam: int = setting(4, "--run_dir: export beam size.", minimum=1)
  texts_file: Optional[str] = setting(
    None,
    "Request texts, one a line (TSV: the first column); default: numbers for the built-in task.",
  )
  model: str = setting("tfattn", "The served model's name.")
  seconds: float = setting(8.0, "Seconds of load per measurement.", minimum=0)
  concurrency: int = setting(8, "Concurrent clients.", minimum=1)
  echo_model: bool = setting(
    False,
    "Serve a model that only appends '!' to each text (instead of --model_base_path): "
    "measures the HTTP stack.",
  )
  servers: List[str] = setting(
    ("new",), "HTTP stacks to compare: new, old, cheroot, tornado (comma-separated)."
  )
  protocols: List[str] = setting(
    ("rest", "grpc"), "With the new server alone: measure REST, gRPC or both."
  )
  rounds: int = setting(
    1, "With --servers: measure every server this many times, report medians.", minimum=1
  )
  old_ref: str = setting(
    "ae5f38d", "Git commit whose serving.server is `old` (default: the last one on http.server)."
  )
  candidates_path: str = setting(
    "", "Directory with cheroot/tornado installed (pip install --target)."
  )
  load: Optional[str] = setting(None, "Internal: run as the load process (protocol,port,batch).")
  host_app: Optional[str] = setting(None, "Internal: host a candidate HTTP stack.")
  port_file: Optional[str] = setting(None, "Internal: where a candidate server writes its port.")
  batching_file: Optional[str] = setting(None, "Internal: a candidate server's batching config.")


def _define_flags():

  cli.define_flags(RestLatencyFlags)
  # Internal: the benchmark starts itself as the load process and as a candidate server.


def main(argv):
  cli.start_tensorflow_quietly()  # the flags are good: now TensorFlow, quietly
  del argv  # cli.run refuses positional arguments
  from absl import flags

  # A plain namespace: measure_all records the extracted old tree on it.
  args = types.SimpleNamespace(**flags.FLAGS.flag_values_dict())
  unknown = set(args.servers) - {"new", "old", "cheroot", "tornado"}
  if unknown:
    raise cli.UsageError(f"--servers: unknown {', '.join(sorted(unknown))}")
  if set(args.protocols) - {"rest", "grpc"} or not args.protocols:
    raise cli.UsageError(f"--protocols must name rest and/or grpc, got {args.protocols}")
  if args.host_app:
    host_app(args.host_app, args.model_base_path, args.model, args.port_file, args.batching_file)
    return
  if args.load:
    protocol, port, batch = args.load.split(",")
    print(
      json.dumps(
        load(
          protocol,
          int(port),
          args.model,
          int(batch),
          args.concurrency,
          args.seconds,
          common.read_texts(args.texts_file) if args.texts_file else TEXTS,
        )
      )
    )
    return
  if not (args.run_dir or args.echo_model or os.path.isdir(args.model_base_path)):
    raise cli.UsageError(
      f"{args.model_base_path} does not exist: run `make run` first, or pass --run_dir "
      "or --echo_model"
    )
  scratch = tempfile.mkdtemp(prefix="rest-latency-")  # exports, batching file: removed at the end
  try:
    measure_all(args, scratch)
  finally:
    shutil.rmtree(scratch, ignore_errors=True)


def measure_all(args, scratch):
  """Builds or finds the models, measures every server on each, prints the tables."""
  if args.run_dir:
    from serving import export
    from tfattn.decode_options import DecodeOptions

    bases = {}
    for mode in ("graph", "xla"):
      bases[mode] = os.path.join(scratch, mode)
      export.export(
        args.run_dir,
        bases[mode],
        options=DecodeOptions(beam_size=args.beam),
        decode=mode,
        model_name=args.model,
        warmup_batch_sizes=(1, *ALLOWED_BATCH_SIZES),
      )
  elif args.echo_model:
    bases = {"echo": make_echo_model(os.path.join(scratch, "echo"))}
  else:
    bases = {"model": args.model_base_path}
  batching_file = os.path.join(scratch, "batching.config")
  with open(batching_file, "w") as f:
    f.write(
      "max_batch_size { value: 64 }\nbatch_timeout_micros { value: 2000 }\n"
      "num_batch_threads { value: 2 }\nmax_enqueued_batches { value: 100 }\n"
      + "".join(f"allowed_batch_sizes: {size}\n" for size in ALLOWED_BATCH_SIZES)
    )
  print(
    f"device: {common.device_description()}; {', '.join(bases.values())}; "
    f"{args.concurrency} concurrent clients in a second process, {args.seconds:.0f} s each"
  )
  print(
    f"{'model/server':<15} {'batching':<9} {'batch':>5} {'req/s':>8} {'rows/s':>8} "
    f"{'p50 ms':>8} {'p99 ms':>8} {'errors':>6}"
  )
  kinds = args.servers
  if "old" in kinds:
    args.old_tree = extract_tree(args.old_ref)
  try:
    if kinds == ["new"]:
      results = {}
      for label, base in bases.items():
        for protocol in args.protocols:
          name = label if protocol == "rest" else f"{label}/grpc"
          results[name] = measure(base, args, batching_file, name, protocol=protocol)
      compare_protocols(results)
    else:
      results = measure_rounds(bases, args, batching_file, kinds)
      compare_servers(results, kinds)
  finally:
    if "old" in kinds:
      shutil.rmtree(args.old_tree, ignore_errors=True)
  for label, result in results.items():
    for batch in (1, 32):
      on, off = result[True, batch], result[False, batch]
      print(
        f"{label} batch {batch}: batching on/off rows/s {on['rows_per_s']:.1f} / "
        f"{off['rows_per_s']:.1f} = {on['rows_per_s'] / off['rows_per_s']:.2f}x; p50 "
        f"{on['p50_ms']:.1f} / {off['p50_ms']:.1f} ms = {on['p50_ms'] / off['p50_ms']:.2f}x"
      )
  if "xla" in results and "graph" in results:
    for (batching, batch), graph in results["graph"].items():
      xla = results["xla"][batching, batch]
      print(
        f"XLA vs graph, batching {'on' if batching else 'off'}, batch {batch}: p50 "
        f"{graph['p50_ms'] / xla['p50_ms']:.2f}x lower, p99 "
        f"{graph['p99_ms'] / xla['p99_ms']:.2f}x lower, rows/s "
        f"{xla['rows_per_s'] / graph['rows_per_s']:.2f}x"
      )


def make_echo_model(base):
  """<base>/1: a TF1-style SavedModel whose serving_default appends "!" to each text, so the
  figures measure the HTTP stack and JSON handling rather than the model."""
  import tensorflow as tf

  with tf.Graph().as_default(), tf.compat.v1.Session() as session:
    text = tf.compat.v1.placeholder(tf.string, shape=[None], name="text")
    echo = tf.strings.join([text, "!"], name="echo")
    builder = tf.compat.v1.saved_model.Builder(os.path.join(base, "1"))
    builder.add_meta_graph_and_variables(
      session,
      ["serve"],
      signature_def_map={
        "serving_default": tf.compat.v1.saved_model.predict_signature_def(
          {"text": text}, {"echo": echo}
        )
      },
    )
    builder.save()
  return base


def measure_rounds(bases, args, batching_file, kinds):
  """{"model/kind": {(batching, batch): medians over --rounds}}; each round measures every
  server, starting one further down the list, so slow spells of a shared machine spread over
  all of them."""
  samples = {}
  for round_index in range(args.rounds):
    shift = round_index % len(kinds)
    for label, base in bases.items():
      for kind in kinds[shift:] + kinds[:shift]:
        name = f"{label}/{kind}"
        for key, row in measure(base, args, batching_file, name, kind).items():
          samples.setdefault(name, {}).setdefault(key, []).append(row)
  results = {
    name: {
      key: {field: statistics.median(r[field] for r in rows) for field in rows[0]}
      for key, rows in by_key.items()
    }
    for name, by_key in samples.items()
  }
  print(f"medians over {args.rounds} rounds:")
  for name in sorted(results, key=lambda n: (n.rsplit("/", 1)[0], kinds.index(n.rsplit("/")[-1]))):
    for (batching, batch), r in sorted(results[name].items()):
      print(
        f"{name:<15} {'on' if batching else 'off':<9} {batch:>5} {r['requests_per_s']:8.1f} "
        f"{r['rows_per_s']:8.1f} {r['p50_ms']:8.1f} {r['p99_ms']:8.1f} {r['errors']:>6}"
      )
  return results


def compare_protocols(results):
  """gRPC against REST on the same server and model, row by row."""
  for label in [n for n in results if n.endswith("/grpc")]:
    rest = results[label[: -len("/grpc")]]
    for key, row in sorted(results[label].items()):
      base = rest[key]
      print(
        f"{label[:-5]} batching {'on' if key[0] else 'off'} batch {key[1]}: gRPC vs REST "
        f"p50 {row['p50_ms']:.1f} / {base['p50_ms']:.1f} ms = "
        f"{row['p50_ms'] / base['p50_ms']:.2f}x, rows/s {row['rows_per_s']:.1f} / "
        f"{base['rows_per_s']:.1f} = {row['rows_per_s'] / base['rows_per_s']:.2f}x"
      )


def compare_servers(results, kinds):
  """p50/p99 of each server against the first one listed, row by row."""
  first = kinds[0]
  for label in results:
    model, kind = label.rsplit("/", 1)
    if kind == first:
      continue
    for key, row in results[label].items():
      base = results[f"{model}/{first}"][key]
      print(
        f"{model} batching {'on' if key[0] else 'off'} batch {key[1]}: {kind} vs {first} "
        f"p50 {row['p50_ms']:.1f} / {base['p50_ms']:.1f} ms = "
        f"{row['p50_ms'] / base['p50_ms']:.2f}x, p99 {row['p99_ms']:.1f} / "
        f"{base['p99_ms']:.1f} ms = {row['p99_ms'] / base['p99_ms']:.2f}x"
      )


if __name__ == "__main__":
  _define_flags()
  cli.run(main)
