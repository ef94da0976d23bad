"""The GPU pass: one command that measures what issue 31 asks of a GPU, in at most 8 minutes once
TensorFlow is installed, and writes one JSON and one markdown report.

  python benchmarks/gpu_pass.py [--out_dir=gpu_pass] [--quick] [--skip=suite,decode,engines]

Steps, each in its own process with its own timeout (a slow step cannot eat the others), and
all within --budget_seconds:
  device      the GPU, its driver, TensorFlow and CUDA versions; TF's bf16 and TF32 (float32)
              matmul peaks.
  engines     decoding against CTranslate2 with its published protocol (beam 4, batch 32,
              length penalty 0, best of 5; benchmarks/engine_speed.py): our graph, XLA and
              bfloat16 XLA exports against CTranslate2 float32, float16 and int8_float16 on the
              same base-size weights (skipped with the reason where ctranslate2 is missing).
  throughput  the base config in bf16 under XLA: tfattn vs the Keras-MultiHeadAttention peer
              (benchmarks/train_throughput.py), with MFU.
  train       the default task end to end (`python -m train`, with its export): steps/s with
              the automatic --steps_per_loop and with --steps_per_loop=1, the checkpoint dip,
              exact match.
  decode      the trained run's export, graph vs XLA decoding, at batch 1 and 32
              (benchmarks/decode_speed.py).
  replicas    the loss of --gpu_replicas=2 (MirroredStrategy over two halves of the GPU) beside
              one replica.
  suite       the fast test suite (`pytest -m "not slow"`).

--quick runs every step at the tiniest sizes (a CPU check of the pass itself); steps that need
a GPU report "skipped: no GPU". This parent process never imports TensorFlow.
"""

import cli

import dataclasses
import itertools
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time
from typing import List, Optional

from absl import flags

from settings import setting
from train.files import write_json_atomically, write_text_atomically

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# In the order of what users choose us by: a pass cut short by its budget keeps the first.
STEPS = ("device", "engines", "train", "throughput", "decode", "replicas", "suite")
# Seconds each step may take on a GPU (compiles of the base config take ~60 s each on an H200);
# the whole pass is also held to --budget_seconds.
TIMEOUTS = {
  "device": 60,
  "engines": 270,
  "throughput": 200,
  "train": 200,
  "decode": 120,
  "replicas": 90,
  "suite": 150,
}
NO_GPU = "skipped: no GPU"

# The default task at the pass's sizes. Quick: the tiniest run that still trains, evaluates and
# exports (seconds on a CPU).
TINY_TRAIN = [
  "--model=tiny",
  "--d_model=32",
  "--dff=64",
  "--num_heads=4",
  "--num_layers=1",
  "--vocab_examples=300",
  "--vocab_size=200",
  "--batch_size=16",
  "--max_length=16",
  "--eval_examples=16",
  "--test_examples=16",
  "--warmup_steps=5",
  "--attention_images=0",
  "--decode_strategy=greedy",
  "--builtin_train_examples=2000",
]


@dataclasses.dataclass(frozen=True)
class GpuPassFlags:
  """The flags of `benchmarks/gpu_pass.py`."""

  out_dir: str = setting("gpu_pass", "Where the reports (gpu_pass.json, gpu_pass.md) go.")
  quick: bool = setting(False, "The tiniest sizes: checks the pass itself on a CPU.")
  skip: List[str] = setting((), f"Steps not to run, a comma list of {', '.join(STEPS)}.")
  budget_seconds: int = setting(
    480, "The whole pass's time limit; steps past it are skipped.", minimum=1
  )
  run_step: Optional[str] = setting(None, "Internal: run one step in this process.")
  work_dir: Optional[str] = setting(None, "Internal: the pass's working folder.")


def _define_flags():
  cli.define_flags(GpuPassFlags)


# --- Steps (each runs in a child process: `--run_step=NAME`) ----------------------------------
def step_device(quick, work_dir):
  cli.start_tensorflow_quietly()
  import common

  import tensorflow as tf

  from train import performance

  gpus = tf.config.list_physical_devices("GPU")
  device = "/GPU:0" if gpus else "/CPU:0"
  build = tf.sysconfig.get_build_info()
  result = {
    "device": common.device_description(),
    "gpus": len(gpus),
    "driver": _nvidia_smi("driver_version") if gpus else None,
    "tensorflow": tf.__version__,
    "python": platform.python_version(),
    "cuda_build": build.get("cuda_version"),
    "cudnn_build": build.get("cudnn_version"),
    "peaks": {},
  }
  size = 256 if quick else None
  seconds = 0.1 if quick else 1.0
  # TF32: float32 matmuls on tensor cores (TensorFlow's default on Ampere and later).
  tf.config.experimental.enable_tensor_float_32_execution(True)
  dtypes = ("bfloat16", "float32") if gpus or quick else ("float32",)
  for dtype in dtypes:
    name = "tf32" if dtype == "float32" and gpus else dtype
    result["peaks"][name] = performance.measure_matmul_peak(device, dtype, size, seconds)
  return result


def step_throughput(quick, work_dir):
  cli.start_tensorflow_quietly()

  import tensorflow as tf
  import train_throughput

  on_gpu = bool(tf.config.list_physical_devices("GPU"))
  if quick and not on_gpu:
    sizes = dict(config_name="tiny", dtype="float32", steps=1, rounds=1, batch_size=2, length=8)
    xla = ["off"]
  else:
    sizes = dict(config_name="base", dtype="bfloat16", steps=8, rounds=3, batch_size=64)
    sizes.update(length=128)
    xla = ["on"]
  result = train_throughput.measure(
    **sizes, models=["tfattn", "keras_mha"], xla_modes=xla, peak_seconds=0.2 if quick else 1.0
  )
  result["ratios"] = train_throughput.ratios(result)
  return result


def step_engines(quick, work_dir):
  cli.start_tensorflow_quietly()
  import types

  import engine_speed

  folder = os.path.join(work_dir, "engines")
  shutil.rmtree(folder, ignore_errors=True)
  os.makedirs(folder)
  on_gpu = engine_speed._has_gpu()
  sizes = dict(size="base", sentences=512, runs=0, latency_sentences=16)
  # Batch-1 latency compiles one more program under XLA (~a minute of the pass each): measured
  # for the graph export and CTranslate2 here; benchmarks/engine_speed.py measures every engine.
  latency = [e for e in engine_speed.GPU_ENGINES if "_xla" not in e]
  if quick and not on_gpu:
    sizes = dict(size="tiny", sentences=16, runs=1, latency_sentences=2)
  args = types.SimpleNamespace(
    **sizes,
    run_dir=None,
    texts_file=None,
    vocab_size=32000 if sizes["size"] == "base" else 100,
    source_lengths=("17", "32"),
    output_length=32 if sizes["size"] == "base" else 4,
    batch=32 if sizes["size"] == "base" else 8,
    beam=4,
    latency_engines=latency if on_gpu else None,
    threads=0,
    seed=0,
  )
  engines = engine_speed.GPU_ENGINES if on_gpu else engine_speed.CPU_ENGINES
  measured = engine_speed.measure(args, engines, folder, child_timeout=120, log=print)
  same = engine_speed.agreement(measured["results"])
  for engine, result in measured["results"].items():
    result.pop("outputs", None)
    if engine in same:
      result["same_ids_as_tfattn_graph"] = same[engine]
  plan = {k: v for k, v in measured["plan"].items() if k not in ("sentences", "paths")}
  plan["sentence_count"] = len(measured["plan"]["sentences"])
  return {"plan": plan, "results": measured["results"]}


def step_train(quick, work_dir):
  """Two runs of the default task: the automatic --steps_per_loop, whole and exported, then one
  step per call (on a GPU for 1000 steps: its speed, not its score). Steps/s are the median of
  the logged intervals after the first (which holds the compile) that hold no checkpoint; the
  dip is the slowest interval that does."""
  runs = os.path.join(work_dir, "runs")
  shutil.rmtree(runs, ignore_errors=True)
  sizes = (
    [*TINY_TRAIN, "--train_steps=40", "--log_every=10", "--checkpoint_every=20"] if quick else []
  )
  result = {}
  single = ["--steps_per_loop=1", *([] if quick else ["--train_steps=1000"])]
  for name, loop_flags in (("loop", []), ("single", single)):
    run_dir = os.path.join(runs, name)
    command = [sys.executable, "-m", "train", f"--run_dir={run_dir}", *sizes, *loop_flags]
    if name == "loop":
      command.append(f"--export_base_path={os.path.join(work_dir, 'models')}")
    start = time.time()
    finished = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    if finished.returncode:
      raise RuntimeError(f"{' '.join(command[1:])} failed: {finished.stderr[-2000:]}")
    result[name] = {
      "command": " ".join(["python", *command[1:]]),
      "wall_seconds": time.time() - start,
      **_train_figures(run_dir, finished.stderr),
    }
  result["loop_over_single"] = (
    result["loop"]["steps_per_second"] / result["single"]["steps_per_second"]
  )
  result["run_dir"] = os.path.join(runs, "loop")
  return result


def _train_figures(run_dir, output):
  with open(os.path.join(run_dir, "run_config.json")) as f:
    config = json.load(f)
  with open(os.path.join(run_dir, "train_log.jsonl")) as f:
    records = [json.loads(line) for line in f if line.strip()]
  with open(os.path.join(run_dir, "eval.json")) as f:
    evaluation = json.load(f)
  steady, after_checkpoint = [], []
  for previous, record in itertools.pairwise(records):
    # A checkpoint written at a step is timed in the interval that starts there.
    saved = previous["step"] % config["checkpoint_every"] == 0
    (after_checkpoint if saved else steady).append(record["steps_per_second"])
  steps_per_second = statistics.median(steady or [r["steps_per_second"] for r in records])
  compiled = re.findall(r"XLA: compiled the train step .*\((\d+) programs? so far\)", output)
  return {
    "steps_per_loop": config["steps_per_loop"],
    "train_steps": config["train_steps"],
    "steps_per_second": steps_per_second,
    "checkpoint_interval_steps_per_second": min(after_checkpoint) if after_checkpoint else None,
    "checkpoint_dip": (1 - min(after_checkpoint) / steps_per_second) if after_checkpoint else None,
    "mfu": statistics.median(r["mfu"] for r in records[1:] or records),
    "xla_programs": int(compiled[-1]) if compiled else 0,
    "exact_match": {
      role: evaluation[role].get("exact_match")
      for role in ("validation", "test")
      if role in evaluation
    },
  }


def step_decode(quick, work_dir):
  cli.start_tensorflow_quietly()

  import types

  import decode_speed

  run_dir = os.path.join(work_dir, "runs", "loop")
  if not os.path.exists(os.path.join(run_dir, "eval.json")):
    raise RuntimeError(f"no trained run in {run_dir}: the train step did not finish")
  args = types.SimpleNamespace(
    run_dir=run_dir, beam=4, seconds=0.0 if quick else 10.0, texts_file=None
  )
  timings = decode_speed.compare_exports(args, batch_sizes=(1, 32))
  return {str(batch): modes for batch, modes in timings.items()}


def step_replicas(quick, work_dir):
  """`--gpu_replicas=2` (mirrored over two logical GPUs of the one card) beside one replica,
  the same run otherwise: the logged losses side by side."""
  runs = os.path.join(work_dir, "replica_runs")
  shutil.rmtree(runs, ignore_errors=True)
  sizes = [*TINY_TRAIN, "--train_steps=20"] if quick else ["--train_steps=300"]
  sizes += ["--log_every=10" if quick else "--log_every=100"]
  sizes += ["--eval_examples=64", "--test_examples=64"]
  losses = {}
  for name, strategy in (
    ("one", ["--strategy=one_device"]),
    ("two", ["--strategy=mirrored", "--gpu_replicas=2"]),
  ):
    run_dir = os.path.join(runs, name)
    command = [sys.executable, "-m", "train", f"--run_dir={run_dir}", *sizes, *strategy]
    finished = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    if finished.returncode:
      raise RuntimeError(f"{' '.join(command[1:])} failed: {finished.stderr[-2000:]}")
    with open(os.path.join(run_dir, "train_log.jsonl")) as f:
      losses[name] = {r["step"]: r["loss"] for r in map(json.loads, f) if r}
  steps = sorted(set(losses["one"]) & set(losses["two"]))
  return {
    "steps": steps,
    "loss_one_replica": [losses["one"][s] for s in steps],
    "loss_two_replicas": [losses["two"][s] for s in steps],
    "largest_relative_difference": max(
      abs(losses["two"][s] - losses["one"][s]) / abs(losses["one"][s]) for s in steps
    ),
  }


def step_suite(quick, work_dir):
  command = [sys.executable, "-m", "pytest", "-q", "-m", "not slow", "-p", "no:cacheprovider"]
  finished = subprocess.run([*command, "tests"], cwd=REPO, capture_output=True, text=True)
  lines = finished.stdout.strip().splitlines()
  failures = [line for line in lines if line.startswith(("FAILED", "ERROR"))]
  return {
    "command": "python -m pytest -q -m 'not slow' tests",
    "exit_status": finished.returncode,
    "summary": lines[-1] if lines else "",
    "failures": failures[:20],
  }


def _nvidia_smi(field):
  try:
    answer = subprocess.run(
      ["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader", "-i", "0"],
      capture_output=True,
      text=True,
      timeout=20,
    )
    return answer.stdout.strip() or None
  except (OSError, subprocess.SubprocessError):
    return None


# --- The parent: steps in children, then the reports ------------------------------------------
def run_step_in_child(name, args, work_dir, timeout):
  """{"status": "ok" | "failed: ..." | "timed out ...", "seconds", "result"}."""
  out = os.path.join(work_dir, f"{name}.json")
  if os.path.exists(out):
    os.remove(out)
  command = [
    sys.executable,
    os.path.abspath(__file__),
    f"--run_step={name}",
    f"--work_dir={work_dir}",
    *(["--quick"] if args.quick else []),
  ]
  start = time.time()
  try:
    finished = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=timeout)
  except subprocess.TimeoutExpired:
    return {"status": f"timed out after {timeout:.0f} s", "seconds": time.time() - start}
  seconds = time.time() - start
  if finished.returncode or not os.path.exists(out):
    error = [line for line in finished.stderr.strip().splitlines() if "error" in line.lower()]
    reason = (error or finished.stderr.strip().splitlines() or ["no output"])[-1]
    return {"status": f"failed: {reason[-500:]}", "seconds": seconds}
  with open(out) as f:
    return {"status": "ok", "seconds": seconds, "result": json.load(f)}


def run_pass(args):
  out_dir = os.path.abspath(args.out_dir)
  work_dir = os.path.join(out_dir, "work")
  os.makedirs(work_dir, exist_ok=True)
  unknown = sorted(set(args.skip) - set(STEPS))
  if unknown:
    raise cli.UsageError(f"--skip: unknown steps {unknown}; the steps are {', '.join(STEPS)}")
  report = {"quick": args.quick, "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
  steps, deadline = {}, time.time() + args.budget_seconds
  for name in STEPS:
    left = deadline - time.time()
    if name in args.skip:
      steps[name] = {"status": "skipped: --skip"}
    elif name == "replicas" and steps["device"]["status"] != "ok":
      steps[name] = {"status": "skipped: the device step did not run"}
    elif name == "replicas" and not steps["device"]["result"]["gpus"]:
      steps[name] = {"status": NO_GPU}
    elif left < 5:
      steps[name] = {"status": "skipped: the pass's time budget is spent"}
    elif name == "decode" and steps.get("train", {}).get("status") != "ok":
      steps[name] = {"status": "skipped: the train step did not finish"}
    else:
      print(f"gpu_pass: {name} (up to {min(TIMEOUTS[name], left):.0f} s)", flush=True)
      steps[name] = run_step_in_child(name, args, work_dir, min(TIMEOUTS[name], left))
      print(f"gpu_pass: {name}: {steps[name]['status']} ({steps[name]['seconds']:.0f} s)")
    # The reports after every step: a pass killed from outside keeps what it measured.
    _write_reports(out_dir, report, steps, args.budget_seconds - (deadline - time.time()))
  print(f"gpu_pass: reports in {out_dir}/gpu_pass.json and gpu_pass.md")
  return report


def _write_reports(out_dir, report, steps, seconds):
  report["steps"] = {name: steps.get(name, {"status": "not run yet"}) for name in STEPS}
  report["total_seconds"] = seconds
  write_json_atomically(os.path.join(out_dir, "gpu_pass.json"), report)
  write_text_atomically(os.path.join(out_dir, "gpu_pass.md"), markdown(report))


def markdown(report):
  """The report for people: one section per step, its status, its figures."""
  steps = report["steps"]

  def result(name):
    return steps[name].get("result") if steps[name]["status"] == "ok" else None

  lines = [
    "# GPU pass"
    + (" (--quick: the tiniest sizes, no figures to quote)" if report["quick"] else ""),
    "",
    f"Started {report['started']}; {report['total_seconds']:.0f} s in all.",
    "",
    "| step | status | seconds |",
    "|---|---|---|",
  ]
  for name, step in steps.items():
    seconds = f"{step['seconds']:.0f}" if "seconds" in step else ""
    lines.append(f"| {name} | {step['status']} | {seconds} |")
  device = result("device")
  if device:
    lines += [
      "",
      "## Device",
      f"- {device['device']}; driver {device['driver']}; TensorFlow {device['tensorflow']} "
      f"(CUDA {device['cuda_build']}, cuDNN {device['cudnn_build']}); Python {device['python']}",
      *(
        f"- {dtype} matmul peak: {value / 1e12:.3g} TFLOP/s"
        for dtype, value in device["peaks"].items()
      ),
    ]
  throughput = result("throughput")
  if throughput:
    c = throughput["config"]
    lines += [
      "",
      f"## Training throughput: {c['name']} config, {c['dtype']}, batch {c['batch']}, length "
      f"{c['length']}",
      "| model | XLA | s/step | target tok/s | MFU |",
      "|---|---|---|---|---|",
      *(
        f"| {v['model']} | {v['xla']} | {v['seconds_per_step']:.4f} | "
        f"{v['target_tokens_per_second']:.0f} | {v['mfu']:.3g} |"
        for v in throughput["variants"]
      ),
      *(f"- tfattn / keras_mha, {k}: **{v:.2f}x**" for k, v in throughput["ratios"].items()),
    ]
  engines = result("engines")
  if engines:
    plan = engines["plan"]
    lines += [
      "",
      f"## Decoding against CTranslate2 (random weights, {plan['sentence_count']} "
      f"sentences, batch {plan['batch']}, beam {plan['beam']}, length penalty 0, best of "
      f"{plan['runs']})",
      "| engine | tokens/s | batch-1 p50 ms | p90 ms | peak MiB | same ids as tfattn_graph |",
      "|---|---|---|---|---|---|",
    ]
    for name, r in engines["results"].items():
      if r.get("status") != "ok":
        lines.append(f"| {name} | {r.get('status')} | | | | |")
        continue
      lines.append(
        f"| {name} | {r['tokens_per_second']:.0f} | {r.get('latency_p50_ms', float('nan')):.1f} "
        f"| {r.get('latency_p90_ms', float('nan')):.1f} | {r['peak_memory_mb']:.0f} | "
        f"{r.get('same_ids_as_tfattn_graph', float('nan')):.1%} |"
      )
  train = result("train")
  if train:
    lines += [
      "",
      "## The default task end to end",
      "| run | steps_per_loop | steps/s | after a checkpoint | dip | MFU | exact match (val, test) "
      "| wall s |",
      "|---|---|---|---|---|---|---|---|",
    ]
    for name in ("loop", "single"):
      r = train[name]
      dip = f"{r['checkpoint_dip']:.0%}" if r["checkpoint_dip"] is not None else ""
      after = r["checkpoint_interval_steps_per_second"]
      lines.append(
        f"| {name} | {r['steps_per_loop']} | {r['steps_per_second']:.1f} | "
        f"{'' if after is None else f'{after:.1f}'} | {dip} | {r['mfu']:.3g} | "
        f"{r['exact_match'].get('validation')}, {r['exact_match'].get('test')} | "
        f"{r['wall_seconds']:.0f} |"
      )
    lines.append(f"- steps/s, loop / single: **{train['loop_over_single']:.2f}x**")
  decode = result("decode")
  if decode:
    lines += [
      "",
      "## Export decoding (beam 4), graph vs XLA",
      "| batch | graph p50 ms | XLA p50 ms | speed-up | XLA rows/s |",
      "|---|---|---|---|---|",
    ]
    for batch, modes in decode.items():
      graph, xla = modes["graph"], modes["xla"]
      lines.append(
        f"| {batch} | {graph['p50_ms']:.1f} | {xla['p50_ms']:.1f} | "
        f"{graph['p50_ms'] / xla['p50_ms']:.2f}x | {xla['rows_per_second']:.0f} |"
      )
  replicas = result("replicas")
  if replicas:
    lines += [
      "",
      "## --gpu_replicas=2 beside one replica",
      "| step | loss, one | loss, two |",
      "|---|---|---|",
      *(
        f"| {s} | {a:.4f} | {b:.4f} |"
        for s, a, b in zip(
          replicas["steps"], replicas["loss_one_replica"], replicas["loss_two_replicas"]
        )
      ),
      f"- largest relative difference: {replicas['largest_relative_difference']:.2%}",
    ]
  suite = result("suite")
  if suite:
    lines += ["", "## Fast suite", f"- `{suite['command']}`: {suite['summary']}"]
    lines += [f"  - {line}" for line in suite["failures"]]
  return "\n".join(lines) + "\n"


def main(argv):
  del argv  # cli.run refuses positional arguments
  args = flags.FLAGS
  if args.run_step:
    if args.run_step not in STEPS or not args.work_dir:
      raise cli.UsageError("--run_step needs one of the steps and --work_dir")
    result = globals()[f"step_{args.run_step}"](args.quick, args.work_dir)
    write_json_atomically(os.path.join(args.work_dir, f"{args.run_step}.json"), result)
    return
  run_pass(args)


if __name__ == "__main__":
  _define_flags()
  cli.run(main)
