"""Whole-file prediction, side by side: lines/s of `python -m serving.tools.predict`'s loop with and
without length-sorted batches, the same file through `serving.server`'s REST API (concurrent
clients, one line a request, the server's default flags), the Beam pipeline on the local runner
with worker processes, and the command's peak memory at two file sizes.

  python benchmarks/batch_predict.py --model=models/mine --input=test_2016_flickr.de
  python benchmarks/batch_predict.py --model=M --input=F --modes=sorted,unsorted --lines=200

Modes (--modes, any of):
  sorted, unsorted  the command's loop in this process (model loaded once, not timed): every
                    window sorted by length (the export's tokens) into batches, or batched in
                    file order; --rounds passes of each in turn, the median. Each pass also
                    reports lines per CPU-second of this process (all its threads), which other
                    jobs on a shared machine disturb far less than the wall clock.
  rest              `python -m serving.server` on the export (its default flags), fed by
                    --clients threads, one line a request; compared with `sorted`.
  beam              `serving.tools.beam_predict.run` with FnApiRunner, --beam_workers processes
                    (multi_processing), start and model loads included; its output is compared
                    with `python -m serving.tools.predict`'s, line for line.
  memory            `python -m serving.tools.predict` on the file repeated to --lines and to
                    --memory_factor times that: peak RSS of each process (os.wait4).

The input is cut or repeated to --lines lines. Ratios are printed at the end.
"""

import cli
import common

import dataclasses
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import List, Optional

from absl import flags

from serving.server import launch
from serving.tools import batch_files, batch_model
from settings import setting

MODES = ("sorted", "unsorted", "rest", "beam", "memory")


@dataclasses.dataclass(frozen=True)
class BatchPredictFlags:
  """The flags of `benchmarks/batch_predict.py`."""

  model: Optional[str] = setting(None, "Export base path or version directory (required).")
  input: Optional[str] = setting(None, "A text file, one input a line (a TSV: its first column).")
  modes: List[str] = setting(tuple(MODES), f"Which to measure, of {', '.join(MODES)}.")
  lines: int = setting(1000, "Lines to predict (the input cut or repeated).", minimum=1)
  batch_size: int = setting(64, "Lines per signature call (command and Beam).", minimum=1)
  window: int = setting(2048, "The command's window.", minimum=1)
  clients: int = setting(8, "Concurrent REST clients, one line a request.", minimum=1)
  beam_workers: int = setting(2, "Beam worker processes (1: Beam's in-process mode).", minimum=1)
  memory_factor: int = setting(10, "The larger memory file is this many times --lines.", minimum=2)
  rounds: int = setting(3, "Sorted and unsorted passes, in turn (median).", minimum=1)
  work_dir: Optional[str] = setting(
    None, "Where files are written and kept (default: a temporary folder, removed at the end)."
  )


cli.define_flags(BatchPredictFlags)


def input_lines(path, count):
  """The file's lines (a TSV's first column), cut or repeated to `count`."""
  with open(path, encoding="utf-8") as f:
    lines = [line.rstrip("\n").split("\t")[0] for line in f]
  if not lines:
    raise cli.UsageError(f"--input {path} is empty")
  return [lines[i % len(lines)] for i in range(count)]


def write_lines(path, lines):
  with open(path, "w", encoding="utf-8") as f:
    f.write("".join(line + "\n" for line in lines))
  return path


def loop_lines_per_second(model, path, window, batch_size, sort):
  """The command's loop (`batch_model.run_window` over its windows), timed; -> (lines/s,
  lines per CPU-second of this process, outputs)."""
  start, cpu_start, outputs = time.perf_counter(), time.process_time(), []
  with open(path, "rb") as stream:
    for lines in batch_files.windows(batch_files.read_lines(stream, path, 0), window):
      outputs += [output for _, output, _ in batch_model.run_window(model, lines, batch_size, sort)]
  wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
  return len(outputs) / wall, len(outputs) / cpu, outputs


def rest_lines_per_second(base_path, lines, clients):
  """`serving.server` with its default flags, `clients` threads each sending one line a
  request until the lines run out; -> (lines/s, translations)."""
  from serving.tools.client import ServingClient

  process, ports = launch.start_subprocess("bench", base_path)
  try:
    client = ServingClient("bench", port=ports.rest)
    client.wait_until_available()
    client.predict(instances=[lines[0]])  # the first request of a connection, not timed
    answers, next_line, lock = [None] * len(lines), [0], threading.Lock()

    def work():
      one = ServingClient("bench", port=ports.rest)
      while True:
        with lock:
          index = next_line[0]
          next_line[0] += 1
        if index >= len(lines):
          return
        answers[index] = one.predict(instances=[lines[index]])["predictions"][0]

    threads = [threading.Thread(target=work) for _ in range(clients)]
    start = time.perf_counter()
    for thread in threads:
      thread.start()
    for thread in threads:
      thread.join()
    return len(lines) / (time.perf_counter() - start), answers
  finally:
    launch.stop(process)


def predict_command(model, input_path, output, *extra):
  return [
    sys.executable,
    "-m",
    "serving.tools.predict",
    f"--model={model}",
    f"--input={input_path}",
    f"--output={output}",
    "--progress_every=0",
    *extra,
  ]


def run_measured(command):
  """Runs a command; -> (seconds, peak RSS in MB) of that process alone."""
  start = time.perf_counter()
  process = subprocess.Popen(command, cwd=launch.REPO_ROOT, stderr=subprocess.PIPE)
  _, status, usage = os.wait4(process.pid, 0)
  seconds = time.perf_counter() - start
  process.returncode = os.waitstatus_to_exitcode(status)
  if process.returncode != 0:
    raise cli.RunError(f"{' '.join(command)} failed: {process.stderr.read().decode()[-2000:]}")
  process.stderr.close()
  return seconds, usage.ru_maxrss / 1024  # Linux reports kilobytes


def main(argv):
  del argv
  f = flags.FLAGS
  unknown = sorted(set(f.modes) - set(MODES))
  if unknown:
    raise cli.UsageError(f"--modes: unknown {unknown}; choose from {', '.join(MODES)}")
  if not f.model or not f.input:
    raise cli.UsageError("--model and --input are required")
  try:
    export_dir = batch_model.resolve_export(f.model)
  except ValueError as error:
    raise cli.UsageError(str(error)) from None
  lines = input_lines(f.input, f.lines)
  if f.work_dir:
    os.makedirs(f.work_dir, exist_ok=True)
    measure(f, export_dir, lines, f.work_dir)
  else:
    with tempfile.TemporaryDirectory(prefix="batch-predict-") as work_dir:  # removed after
      measure(f, export_dir, lines, work_dir)


def measure(f, export_dir, lines, work_dir):
  """Times each of f.modes on `lines`, writing its files under `work_dir`, and prints the rates
  and ratios."""
  path = write_lines(os.path.join(work_dir, "input.txt"), lines)
  cli.start_tensorflow_quietly()
  print(f"{len(lines):,} lines of {f.input}; export {export_dir}; {common.device_description()}")
  results, outputs = {}, {}
  if {"sorted", "unsorted", "rest"} & set(f.modes):
    model = batch_model.BatchModel(export_dir, "serving_default", batch_model.TEXT)
    model.predict([batch_files.Line(0, 1, lines[0], "", "warm-up")])  # traces the signature
    # Sorted and unsorted in turn, round after round (median): a busy machine slows both alike.
    looped = [
      m for m in ("sorted", "unsorted") if m in f.modes or (m == "sorted" and "rest" in f.modes)
    ]
    rates = {mode: [] for mode in looped}
    cpu_rates = {mode: [] for mode in looped}
    for _ in range(f.rounds):
      for mode in looped:
        rate, cpu_rate, outputs[mode] = loop_lines_per_second(
          model, path, f.window, f.batch_size, sort=mode == "sorted"
        )
        rates[mode].append(rate)
        cpu_rates[mode].append(cpu_rate)
    for mode in looped:
      results[mode] = statistics.median(rates[mode])
      results[f"{mode}_cpu"] = statistics.median(cpu_rates[mode])
      each = ", ".join(f"{rate:,.1f}" for rate in rates[mode])
      each_cpu = ", ".join(f"{rate:,.1f}" for rate in cpu_rates[mode])
      print(
        f"{mode}: {results[mode]:,.1f} lines/s (median of {each}); "
        f"{results[f'{mode}_cpu']:,.1f} lines per CPU-second (median of {each_cpu})",
        flush=True,
      )
    if "unsorted" in looped:
      same = sum(a == b for a, b in zip(outputs["sorted"], outputs["unsorted"]))
      print(f"sorted and unsorted outputs: {same:,} of {len(lines):,} lines equal", flush=True)
  if "rest" in f.modes:
    results["rest"], answers = rest_lines_per_second(os.path.dirname(export_dir), lines, f.clients)
    same = sum(
      " ".join(a.get("translation", "").split()) == b for a, b in zip(answers, outputs["sorted"])
    )
    print(
      f"rest ({f.clients} clients, one line a request): {results['rest']:,.1f} lines/s; "
      f"{same:,} of {len(lines):,} answers equal the command's",
      flush=True,
    )
  # The command over the lines, run once: Beam's reference and its rate, and the memory mode's
  # first size (one process start and model load fewer).
  command_runs = {}
  if "beam" in f.modes:
    from serving.tools import beam_predict

    reference = os.path.join(work_dir, "predict.txt")
    seconds, command_runs[len(lines)] = run_measured(
      predict_command(
        export_dir, path, reference, f"--window={f.window}", f"--batch_size={f.batch_size}"
      )
    )
    results["command"] = len(lines) / seconds
    print(
      "command (python -m serving.tools.predict, start included): "
      f"{results['command']:,.1f} lines/s"
    )
    beam_output = os.path.join(work_dir, "beam.txt")
    start = time.perf_counter()
    beam_predict.run(
      export_dir,
      [path],
      beam_output,
      batch_size=f.batch_size,
      beam_options=[
        f"--direct_num_workers={f.beam_workers}",
        "--direct_running_mode=multi_processing",
      ]
      if f.beam_workers > 1
      else [],  # one worker: in this process
    )
    results["beam"] = len(lines) / (time.perf_counter() - start)
    with open(reference, "rb") as a, open(beam_output, "rb") as b:
      identical = a.read() == b.read()
    results["beam_identical"] = identical
    print(
      f"beam (FnApiRunner, {f.beam_workers} worker(s), start and loads included): "
      f"{results['beam']:,.1f} lines/s; output identical to serving.tools.predict's: {identical}",
      flush=True,
    )
  if "memory" in f.modes:
    rss = {}
    for count in (len(lines), len(lines) * f.memory_factor):
      if count in command_runs:  # the same command on the same lines
        rss[count] = command_runs[count]
        seconds = len(lines) / results["command"]
      else:
        big = write_lines(os.path.join(work_dir, f"memory-{count}.txt"), input_lines(path, count))
        out = os.path.join(work_dir, f"memory-{count}.out")
        seconds, rss[count] = run_measured(
          predict_command(
            export_dir, big, out, f"--window={f.window}", f"--batch_size={f.batch_size}"
          )
        )
      print(f"memory: {count:,} lines: peak RSS {rss[count]:,.0f} MB ({seconds:.1f} s)", flush=True)
    small, large = sorted(rss)
    results["memory_ratio"] = rss[large] / rss[small]
  print("ratios:")
  if "sorted" in results and "unsorted" in results:
    print(
      f"  sorted / unsorted batching: {results['sorted'] / results['unsorted']:.2f}x "
      f"(per CPU-second: {results['sorted_cpu'] / results['unsorted_cpu']:.2f}x)"
    )
  if "rest" in results:
    print(f"  file command (sorted) / REST: {results['sorted'] / results['rest']:.2f}x")
  if "beam" in results:
    print(
      f"  Beam local ({f.beam_workers} workers) / the command, both with start: "
      f"{results['beam'] / results['command']:.2f}x; identical output: {results['beam_identical']}"
    )
  if "memory_ratio" in results:
    print(f"  peak RSS at {f.memory_factor}x the lines: {results['memory_ratio']:.2f}x")


if __name__ == "__main__":
  cli.run(main)
