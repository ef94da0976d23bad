"""Decoding speed against the engines production translation runs on, with CTranslate2's published
protocol (its README's benchmark section and tools/benchmark/): beam 4, batch 32, length penalty
0; target tokens per second, the best of 3 runs (5 on a GPU), model load excluded, tokenization
excluded (every engine reads and writes token ids); batch-1 latency p50/p90 beside it, and the
peak memory.

  python benchmarks/engine_speed.py                      # base size, fixed random weights
  python benchmarks/engine_speed.py --run_dir=runs/multi30k_de_en --texts_file=test.de

Engines, each timed in a process of its own on the same weights and the same sentences:
  tfattn_graph, tfattn_xla         our SavedModel exports (`python -m serving.export
                                   --decode=graph|xla`), loaded and called through their
                                   `translate_ids` signature as TF Serving would
  tfattn_graph_bf16, tfattn_xla_bf16 the same exports with --serving_dtype=bfloat16 (weights
                                   stored and matmuls run in bfloat16; softmax, norms, logits
                                   and scores in float32)
  ctranslate2_<type>               our CTranslate2 export (`serving/export/ctranslate2_model.py`)
                                   loaded with compute_type <type>: float32, int8, int16, float16,
                                   bfloat16, int8_float16 (the last three on a GPU)
  transformers                     with --marian_dir: transformers' MarianMTModel.generate on the
                                   checkpoint itself (PyTorch, float32), in the interpreter of
                                   --reference_python (requirements-marian-reference.txt; make
                                   check-marian builds .venv-ref); skipped with the reason else

Models:
  * (default) the base size (6+6 layers, d_model 512, 8 heads, dff 2,048) with a 32,000-token
    shared vocabulary and fixed random weights. END gets an output bias of -1e4, so every engine
    writes exactly --output_length tokens for every sentence: tokens/s compares like with like.
  * --run_dir: a trained seq2seq run (e.g. the multi30k_de_en recipe's), real sentences from
    --texts_file tokenized by the run's own tokenizer; the engines must also agree on the
    translations (the share of sentences whose ids equal tfattn_graph's is printed).
  * --marian_dir: a Marian / OPUS-MT checkpoint as the Hugging Face Hub stores it, imported
    (`python -m train.import_marian`) into the work directory: every engine, transformers
    included, on its weights. With --fixed_length (the default for a random-weight checkpoint
    such as `make check-marian`'s base-size one: pass it) every engine writes exactly
    --output_length tokens (our min_decode_length, CTranslate2's min_decoding_length,
    transformers' min_new_tokens); without it, --texts_file's sentences end where the model ends
    them.

Sentences are sorted by length and cut into batches of --batch (CTranslate2's translate_batch
does the same with max_batch_size); every engine gets the same batches. Needs
`requirements-ctranslate2.txt` for the CTranslate2 rows (skipped with the reason otherwise).
"""

import cli

import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import List, Optional

from absl import flags

from settings import setting

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TF_ENGINES = ("tfattn_graph", "tfattn_xla", "tfattn_graph_bf16", "tfattn_xla_bf16")
CT2_TYPES = ("float32", "int8", "int16", "float16", "bfloat16", "int8_float16")
ENGINES = TF_ENGINES + tuple(f"ctranslate2_{t}" for t in CT2_TYPES) + ("transformers",)
CPU_ENGINES = (
  "tfattn_graph",
  "tfattn_xla",
  "tfattn_graph_bf16",
  "ctranslate2_float32",
  "ctranslate2_int8",
  "transformers",
)
REFERENCE_PYTHON = os.path.join(REPO, ".venv-ref", "bin", "python")
GPU_ENGINES = (
  "tfattn_graph",
  "tfattn_xla",
  "ctranslate2_float32",
  "ctranslate2_float16",
  "ctranslate2_int8_float16",
  "tfattn_xla_bf16",
)
# The base size of the paper, as OPUS-MT's models have it (their vocabularies are 58k; the
# issue's protocol model has ~32k pieces).
BASE = dict(d_model=512, num_heads=8, dff=2048, num_encoder_layers=6, num_decoder_layers=6)
TINY = dict(d_model=32, num_heads=4, dff=64, num_encoder_layers=1, num_decoder_layers=1)


@dataclasses.dataclass(frozen=True)
class EngineSpeedFlags:
  """The flags of `benchmarks/engine_speed.py`."""

  engines: Optional[List[str]] = setting(
    None,
    f"Engines to time, a comma list of {', '.join(ENGINES)} (default: {', '.join(CPU_ENGINES)} "
    f"on a CPU; {', '.join(GPU_ENGINES)} on a GPU).",
  )
  run_dir: Optional[str] = setting(
    None, "A trained seq2seq run to time (default: the base size with fixed random weights)."
  )
  marian_dir: Optional[str] = setting(
    None,
    "A Marian / OPUS-MT checkpoint (the Hub's layout) to import and time, transformers included.",
  )
  fixed_length: Optional[bool] = setting(
    None,
    "Every engine writes exactly --output_length tokens a sentence (default: on for the "
    "random model, off for --run_dir and --marian_dir).",
  )
  reference_python: Optional[str] = setting(
    None,
    "The interpreter with torch and transformers that times the transformers row (default: "
    ".venv-ref/bin/python, make check-marian's).",
  )
  texts_file: Optional[str] = setting(
    None,
    "With --run_dir or --marian_dir: source sentences, one a line (default: random ones).",
  )
  size: str = setting("base", "The random model's size (tiny: tests).", choices=("base", "tiny"))
  vocab_size: int = setting(32000, "The random model's shared vocabulary.", minimum=8)
  sentences: int = setting(512, "Sentences timed (cut into batches of --batch).", minimum=1)
  source_lengths: List[str] = setting(
    ("17", "32"),
    "The random sentences' shortest and longest length in tokens (uniform; newstest2014's "
    "English averages ~27 SentencePiece tokens).",
  )
  output_length: int = setting(
    32, "With --fixed_length: tokens every engine writes for every sentence.", minimum=1
  )
  batch: int = setting(32, "Sentences a batch (CTranslate2's max_batch_size).", minimum=1)
  beam: int = setting(4, "Beam size.", minimum=1)
  runs: int = setting(
    0,
    "Timed passes over every batch, the best kept (0: 3 on a CPU, 5 on a GPU as the protocol).",
    minimum=0,
  )
  latency_sentences: int = setting(
    32, "Sentences translated one at a time for the batch-1 latency (0: none).", minimum=0
  )
  latency_engines: Optional[List[str]] = setting(
    None, "Engines whose batch-1 latency is measured (default: all of --engines)."
  )
  threads: int = setting(0, "CPU threads per engine (0: every core of this machine).", minimum=0)
  out_json: Optional[str] = setting(None, "Also write the results here (JSON).")
  work_dir: Optional[str] = setting(None, "Where models and exports go (default: a temp dir).")
  seed: int = setting(0, "The random weights' and sentences' seed.")
  child: Optional[str] = setting(None, "Internal: time one engine in this process.")


def _define_flags():
  cli.define_flags(EngineSpeedFlags)


# --- Preparing the work directory (parent) ----------------------------------------------------
def _letters(i):
  """A token made of letters only (WordPiece splits digits): 4 -> 'xe', 31 -> 'xbf'."""
  word = ""
  while True:
    word = "abcdefghijklmnopqrstuvwxyz"[i % 26] + word
    i //= 26
    if not i:
      return "x" + word


def make_random_run(run_dir, size, vocab_size, seed, output_length):
  """A run directory as `python -m train` leaves one, for a Transformer of `size` with fixed
  random weights: a WordPiece vocabulary of letter tokens shared by both sides, the configs and
  one checkpoint. END's output bias is -1e4 so no engine stops before its length limit."""
  import numpy as np
  import tensorflow as tf

  import tfattn
  from tfattn import kinds, special_ids
  from tfattn.support.run_dir import RunDir

  layout = RunDir(run_dir)
  os.makedirs(layout.vocab, exist_ok=True)
  tokens = list(special_ids.RESERVED_TOKENS) + [_letters(i) for i in range(4, vocab_size)]
  for side in ("source", "target"):
    with open(os.path.join(layout.vocab, f"{side}.txt"), "w", encoding="utf-8") as f:
      f.write("\n".join(tokens) + "\n")
  config = tfattn.TransformerConfig(
    **(BASE if size == "base" else TINY),
    source_vocab_size=vocab_size,
    target_vocab_size=vocab_size,
    share_embeddings=True,
    tie_output_embedding=False,  # an output layer with a bias, to rule END out
    max_length=max(256, output_length),
    dropout_rate=0.0,
    seed=seed,
  )
  model = tfattn.Transformer(config)
  bias = np.zeros([vocab_size], np.float32)
  # END never chosen: every output has the full length. PAD and START neither: no engine writes
  # a token that reads as padding (a random model's flat softmax would now and then).
  bias[[config.eos_id, config.pad_id, config.bos_id]] = -1e4
  model.output_projection.bias.assign(bias)
  with open(layout.model_config, "w") as f:
    f.write(config.to_json())
  with open(layout.task, "w") as f:
    json.dump({"name": "random", "kind": kinds.SEQ2SEQ, "truncate": "right"}, f)
  tf.train.Checkpoint(model=model).save(os.path.join(layout.checkpoints, "ckpt"))
  return tokens


def _random_sentences(count, lengths, vocab_size, seed):
  import numpy as np

  rng = np.random.default_rng(seed + 1)
  low, high = lengths
  return [rng.integers(4, vocab_size, rng.integers(low, high + 1)).tolist() for _ in range(count)]


def _run_sentences(run_dir, texts_file, count, max_length):
  """Source ids of --texts_file (or of random vocabulary pieces) by the run's tokenizer,
  each cut to the model's `max_length` positions."""
  import common

  import tensorflow as tf

  from tfattn import text
  from tfattn.support.run_dir import RunDir

  tokenizer = text.load_tokenizer(text.tokenizer_path(RunDir(run_dir).vocab, "source"))
  if texts_file:
    texts = common.read_texts(texts_file)[:count]
  else:
    import decode_speed

    texts = decode_speed._random_texts(tokenizer, tokenizer.vocab_size, count)
  ragged = tokenizer.tokenize(tf.constant(texts))
  return [row[:max_length] for row in ragged.to_list() if row]


def _marian_sentences(vocab_size, count, lengths, seed):
  """Random source ids of an imported Marian run: pieces of its vocabulary (no special id),
  each row ending with `</s>` as its tokenizer ends a source."""
  import numpy as np

  from tfattn import special_ids

  rng = np.random.default_rng(seed + 1)
  low, high = lengths
  return [
    [*rng.integers(4, vocab_size, rng.integers(low, high + 1)).tolist(), special_ids.END_ID]
    for _ in range(count)
  ]


def _marian_ids(run_dir):
  """[Marian id of tfattn id i] (-1 for our padding row): the import's renumbering."""
  from tfattn import marian_text

  spec = marian_text.read_spec(os.path.join(run_dir, "vocab", "target.marian"))
  return [-1] + [int(i) for i in spec["ids"]]


def prepare(args, work_dir, engines):
  """Writes the run (or uses --run_dir, or imports --marian_dir), the sentences, the exports
  and CTranslate2 models the engines need; returns the plan every child reads."""
  from serving import export
  from serving.export import ctranslate2_model
  from serving.export.trained_run import run_decode_options

  random_model = args.run_dir is None and args.marian_dir is None
  fixed = random_model if args.fixed_length is None else args.fixed_length
  run_dir = args.run_dir or os.path.join(work_dir, "run")
  if random_model and not os.path.exists(run_dir):
    make_random_run(run_dir, args.size, args.vocab_size, args.seed, args.output_length)
  if args.marian_dir and not os.path.exists(run_dir):
    from train.import_marian import import_checkpoint

    import_checkpoint(args.marian_dir, run_dir)
  with open(os.path.join(run_dir, "model_config.json")) as f:
    model_config = json.load(f)
  max_length = model_config["max_length"]
  lengths = [int(x) for x in args.source_lengths]
  if random_model:
    sentences = _random_sentences(args.sentences, lengths, args.vocab_size, args.seed)
  elif args.marian_dir and not args.texts_file:
    vocab_size = model_config["source_vocab_size"]
    sentences = _marian_sentences(vocab_size, args.sentences, lengths, args.seed)
  else:
    sentences = _run_sentences(run_dir, args.texts_file, args.sentences, max_length)
  options = run_decode_options(run_dir).replace(strategy="beam", beam_size=args.beam, alpha=0.0)
  if fixed:  # every engine writes exactly output_length tokens: tokens/s compares like with like
    max_decoding_length = args.output_length
    options = options.replace(
      max_decode_length=max_decoding_length, min_decode_length=max_decoding_length
    )
  else:
    # One length limit for every sentence and engine (CTranslate2 has one a batch, our export
    # one a sentence by default): the protocol's 256, within the model's positions.
    max_decoding_length = min(256, max_length)
    options = options.replace(max_decode_length=max_decoding_length)
  # transformers' forced END at the limit (an imported run's end_at_limit) has no CTranslate2
  # equivalent: off, so every engine's limit means the same.
  options = options.replace(end_at_limit=False)
  # CTranslate2's translate_batch sorts by length within max_batch_size: every engine gets the
  # same sorted batches.
  sentences.sort(key=len)
  plan = {
    "run_dir": os.path.abspath(run_dir),
    "random_model": random_model,
    "marian_dir": os.path.abspath(args.marian_dir) if args.marian_dir else None,
    "fixed_length": fixed,
    "sentences": sentences,
    "batch": args.batch,
    "beam": args.beam,
    "max_decoding_length": max_decoding_length,
    "min_decoding_length": options.min_decode_length,
    "paths": {},
  }
  if args.marian_dir:
    plan["marian_ids"] = _marian_ids(run_dir)
  for engine in engines:
    path = os.path.join(work_dir, engine)
    if engine.startswith("tfattn"):
      decode = "xla" if "_xla" in engine else "graph"
      dtype = "bfloat16" if engine.endswith("_bf16") else None
      if not os.path.exists(path):
        export.export(run_dir, path, options=options, decode=decode, version=1, serving_dtype=dtype)
      plan["paths"][engine] = os.path.join(path, "1")
    elif engine == "transformers":
      plan["paths"][engine] = plan["marian_dir"]
    else:
      path = os.path.join(work_dir, "ctranslate2")
      if not os.path.exists(path):
        ctranslate2_model.convert_run(run_dir, path)
      plan["paths"][engine] = path
  return plan


# --- Timing one engine (child) ----------------------------------------------------------------
def _batches(sentences, size, pad_id=0):
  import numpy as np

  batches = []
  for start in range(0, len(sentences), size):
    rows = sentences[start : start + size]
    ids = np.full([len(rows), max(map(len, rows))], pad_id, np.int32)
    for i, row in enumerate(rows):
      ids[i, : len(row)] = row
    batches.append(ids)
  return batches


def _visible(row, eos_id=2, pad_id=0):
  """Output ids up to END (not counted, as CTranslate2's protocol counts tokenized output)."""
  out = []
  for token in row:
    if token in (eos_id, pad_id):
      break
    out.append(int(token))
  return out


def _tf_translator(engine, path, threads):
  import tensorflow as tf
  import tensorflow_text  # noqa: F401 (registers the ops of the export's in-graph tokenizers)

  if threads:
    try:
      tf.config.threading.set_intra_op_parallelism_threads(threads)
      tf.config.threading.set_inter_op_parallelism_threads(threads)
    except RuntimeError:  # timed in a process whose TensorFlow has started: its threads stay
      pass
  loaded = tf.saved_model.load(path)
  signature = loaded.signatures["translate_ids"]

  def translate(ids):
    found = signature(source_ids=tf.constant(ids))["ids"].numpy()
    return [_visible(row) for row in found]

  def peak_memory_mb():
    if tf.config.list_physical_devices("GPU"):
      return tf.config.experimental.get_memory_info("GPU:0")["peak"] / 2**20
    return None

  return translate, peak_memory_mb


def _ct2_translator(engine, path, plan, threads):
  import ctranslate2

  compute_type = engine[len("ctranslate2_") :]
  device = "cuda" if ctranslate2.get_cuda_device_count() else "cpu"
  translator = ctranslate2.Translator(
    path,
    device=device,
    compute_type=compute_type,
    inter_threads=1,
    intra_threads=threads or os.cpu_count(),
  )
  source_tokens, target_tokens = ctranslate2_vocabularies(path)
  target_index = {token: i for i, token in enumerate(target_tokens)}

  def translate(ids):
    batch = [[source_tokens[t] for t in row if t] for row in ids]
    results = translator.translate_batch(
      batch,
      beam_size=plan["beam"],
      length_penalty=0.0,
      max_batch_size=plan["batch"],
      max_decoding_length=plan["max_decoding_length"],
      # The random model: every engine held to the length. Otherwise ours (0 unless the run
      # sets one); CTranslate2's default of 1 would renormalize its first step (docs/speed.md).
      min_decoding_length=plan["min_decoding_length"],
    )
    return [[target_index[t] for t in result.hypotheses[0]] for result in results]

  def peak_memory_mb():
    if device != "cuda":
      return None
    try:
      answer = subprocess.run(
        ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        timeout=20,
      ).stdout
    except (OSError, subprocess.SubprocessError):
      return None
    for line in answer.splitlines():
      pid, used = [x.strip() for x in line.split(",")]
      if pid == str(os.getpid()):
        return float(used)  # its caching allocator keeps what it took: ~ the peak
    return None

  return translate, peak_memory_mb


def _transformers_translator(plan, threads):
  """transformers' MarianMTModel.generate on the checkpoint itself: beam search with the
  protocol's settings, length penalty 0 (the sum of log-probs, as CTranslate2's 0), the same
  length limits, `<pad>` never generated (the checkpoint's bad_words_ids). Ids are mapped to
  Marian's on the way in and back to tfattn's on the way out."""
  import numpy as np
  import torch
  from transformers import MarianMTModel

  torch.set_num_threads(threads or os.cpu_count())
  model = MarianMTModel.from_pretrained(plan["marian_dir"]).eval()
  config = model.config
  marian_of = np.array(plan["marian_ids"], np.int64)  # tfattn id -> Marian id
  tfattn_of = {int(m): i for i, m in enumerate(plan["marian_ids"]) if m >= 0}
  length = plan["max_decoding_length"]
  settings = dict(
    num_beams=plan["beam"],
    length_penalty=0.0,
    early_stopping=False,
    do_sample=False,
    max_new_tokens=length,
    min_new_tokens=plan["min_decoding_length"],
    forced_eos_token_id=None,  # our export's end_at_limit is off here, as CTranslate2 has none
    bad_words_ids=[[config.pad_token_id]],
  )

  def translate(ids):
    ids = np.asarray(ids)
    mask = ids != 0
    source = np.where(mask, marian_of[ids], config.pad_token_id)
    with torch.inference_mode():
      found = model.generate(
        input_ids=torch.from_numpy(source), attention_mask=torch.from_numpy(mask), **settings
      ).numpy()
    outputs = []
    for row in found[:, 1:]:  # after the decoder's start token
      out = []
      for token in row.tolist():
        if token in (config.eos_token_id, config.pad_token_id):
          break
        out.append(tfattn_of[token])
      outputs.append(out)
    return outputs

  return translate, lambda: None


def ctranslate2_vocabularies(path):
  """(source tokens, target tokens) of a CTranslate2 model directory: one shared file, or two."""
  shared = os.path.join(path, "shared_vocabulary.json")
  names = (
    [shared, shared]
    if os.path.exists(shared)
    else [os.path.join(path, f"{side}_vocabulary.json") for side in ("source", "target")]
  )
  vocabularies = []
  for name in names:
    with open(name, encoding="utf-8") as f:
      vocabularies.append(json.load(f))
  return tuple(vocabularies)


def time_engine(engine, plan, runs, latency_sentences, threads, report=lambda result: None):
  """{"tokens", "best_seconds", "tokens_per_second", "seconds" (every run), "latency_p50_ms",
  "latency_p90_ms", "peak_memory_mb", "outputs"}: the runs are full passes over the batches
  after one untimed pass (tracing, XLA compiles, CTranslate2's allocations: the model load and
  start-up the protocol excludes). `report(result)` gets the throughput figures before the
  latency is measured (a child that runs out of time keeps them)."""
  path = plan["paths"][engine]
  if engine.startswith("tfattn"):
    translate, peak_memory = _tf_translator(engine, path, threads)
  elif engine == "transformers":
    translate, peak_memory = _transformers_translator(plan, threads)
  else:
    translate, peak_memory = _ct2_translator(engine, path, plan, threads)
  batches = _batches(plan["sentences"], plan["batch"])
  outputs = [row for ids in batches for row in translate(ids)]  # the untimed pass
  seconds = []
  for _ in range(runs):
    start = time.perf_counter()
    for ids in batches:
      translate(ids)
    seconds.append(time.perf_counter() - start)
  tokens = sum(len(row) for row in outputs)
  result = {
    "tokens": tokens,
    "sentences": len(outputs),
    "seconds": seconds,
    "best_seconds": min(seconds),
    "tokens_per_second": tokens / min(seconds),
    "outputs": outputs,
  }
  result.update(_peak_memory(peak_memory))
  report(result)
  if latency_sentences:
    every = max(1, len(plan["sentences"]) // latency_sentences)
    singles = _batches(plan["sentences"][::every][:latency_sentences], 1)
    for ids in singles:  # untimed: XLA compiles each source length bucket's batch-1 program
      translate(ids)
    latencies = []
    for ids in singles:
      start = time.perf_counter()
      translate(ids)
      latencies.append((time.perf_counter() - start) * 1000)
    deciles = statistics.quantiles(latencies, n=10) if len(latencies) > 1 else latencies * 9
    result.update(latency_p50_ms=statistics.median(latencies), latency_p90_ms=deciles[-1])
    result.update(_peak_memory(peak_memory))
    report(result)
  return result


def _peak_memory(gpu_peak_mb):
  """{"peak_memory_mb", "memory_kind"}: the engine's GPU peak on a GPU, else this process's
  resident high-water mark (VmHWM: unlike ru_maxrss it does not inherit the parent's)."""
  peak = gpu_peak_mb()
  if peak is not None:
    return {"peak_memory_mb": peak, "memory_kind": "GPU"}
  with open("/proc/self/status") as f:
    fields = dict(line.split(":", 1) for line in f if ":" in line)
  return {"peak_memory_mb": int(fields["VmHWM"].split()[0]) / 1024, "memory_kind": "CPU RSS"}


def _latency(args, plan, engine):
  """Sentences timed one at a time for `engine` (0: its latency is not measured)."""
  return args.latency_sentences if engine in plan["latency_engines"] else 0


def run_child(args):
  if args.child.startswith("tfattn"):
    cli.start_tensorflow_quietly()
  with open(os.path.join(args.work_dir, "plan.json")) as f:
    plan = json.load(f)
  latency = _latency(args, plan, args.child)
  out = os.path.join(args.work_dir, f"{args.child}.json")

  def report(result):
    with open(out + ".tmp", "w") as f:
      json.dump(result, f)
    os.replace(out + ".tmp", out)

  time_engine(args.child, plan, args.runs or plan["runs"], latency, args.threads, report)


# --- The parent: prepare, one child per engine, the table -------------------------------------
def _has_gpu():
  try:
    return subprocess.run(["nvidia-smi", "-L"], capture_output=True, timeout=20).returncode == 0
  except (OSError, subprocess.SubprocessError):
    return False


def _ct2_unavailable(engines, gpu):
  """{engine: {"status": "skipped: why"}} for the CTranslate2 engines that cannot run here."""
  wanted = [e for e in engines if e.startswith("ctranslate2_")]
  try:
    import ctranslate2
  except ImportError:
    why = "ctranslate2 is not installed (pip install -r requirements-ctranslate2.txt)"
    return {e: {"status": f"skipped: {why}"} for e in wanted}
  supported = ctranslate2.get_supported_compute_types("cuda" if gpu else "cpu")
  return {
    e: {"status": f"skipped: CTranslate2 has no {e[len('ctranslate2_') :]} on this device"}
    for e in wanted
    if e[len("ctranslate2_") :] not in supported
  }


def reference_python(args):
  """The interpreter that times the transformers row, or None."""
  default = os.environ.get("REFERENCE_PYTHON", REFERENCE_PYTHON)
  return args.reference_python or (default if os.path.exists(default) else None)


def _transformers_unavailable(engines, args):
  """{"transformers": {"status": "skipped: why"}} when that row cannot run here."""
  if "transformers" not in engines:
    return {}
  why = None
  python = reference_python(args)
  if not args.marian_dir:
    why = "transformers runs a Marian checkpoint only (--marian_dir)"
  elif python is None:
    why = (
      "no interpreter with torch and transformers (make check-marian builds .venv-ref; or "
      "--reference_python)"
    )
  else:
    probe = subprocess.run(
      [python, "-c", "import torch, transformers"], capture_output=True, text=True, timeout=120
    )
    if probe.returncode:
      why = f"{python} cannot import torch and transformers"
  return {"transformers": {"status": f"skipped: {why}"}} if why else {}


def _ct2_environment(engine, gpu):
  """CTranslate2's float32 on an AMD CPU: its MKL backend (CT2_USE_MKL=1), which it leaves off
  there by default (oneDNN's SGEMM: 11.1 tokens/s at the base size on this EPYC against 68.1
  with MKL, two loaded runs; docs/speed.md). Its int8 is faster on the default backend, so only
  float32 gets it."""
  if gpu or engine != "ctranslate2_float32" or "CT2_USE_MKL" in os.environ:
    return {}
  try:
    with open("/proc/cpuinfo") as f:
      amd = "AuthenticAMD" in f.read()
  except OSError:
    return {}
  return {"CT2_USE_MKL": "1"} if amd else {}


def check_args(args):
  engines = list(args.engines or (GPU_ENGINES if _has_gpu() else CPU_ENGINES))
  unknown = [e for e in engines if e not in ENGINES]
  if unknown:
    raise cli.UsageError(f"--engines: unknown {unknown}; choose from {', '.join(ENGINES)}")
  if len(args.source_lengths) != 2 or not all(x.isdigit() for x in args.source_lengths):
    raise cli.UsageError("--source_lengths takes two integers: the shortest and longest length")
  low, high = (int(x) for x in args.source_lengths)
  if not 1 <= low <= high:
    raise cli.UsageError(f"--source_lengths: need 1 <= shortest <= longest, got {low},{high}")
  if args.texts_file and not (args.run_dir or args.marian_dir):
    raise cli.UsageError(
      "--texts_file needs --run_dir or --marian_dir (the random model has no tokenizer)"
    )
  if args.run_dir and args.marian_dir:
    raise cli.UsageError("--run_dir and --marian_dir: give one model")
  if args.marian_dir and not os.path.exists(os.path.join(args.marian_dir, "config.json")):
    raise cli.UsageError(f"--marian_dir: {args.marian_dir} holds no config.json")
  if args.reference_python and not os.path.exists(args.reference_python):
    raise cli.UsageError(f"--reference_python: {args.reference_python} does not exist")
  if args.texts_file and not os.path.exists(args.texts_file):
    raise cli.UsageError(f"--texts_file: {args.texts_file} does not exist")
  if args.run_dir and not os.path.exists(os.path.join(args.run_dir, "model_config.json")):
    raise cli.UsageError(f"--run_dir: {args.run_dir} is not a training run directory")
  return engines


def measure(args, engines, work_dir, child_timeout=None, log=print, isolate=True):
  """Prepares, then times each engine in a child process (`isolate=False`: in this one, for
  tests: one TensorFlow start for all). Returns {"plan": ..., "results": {engine: result or
  {"status": why not}}}."""
  gpu = _has_gpu()
  skipped = {**_ct2_unavailable(engines, gpu), **_transformers_unavailable(engines, args)}
  timed = [e for e in engines if e not in skipped]
  start = time.time()
  plan = prepare(args, work_dir, timed)
  plan["runs"] = args.runs or (5 if gpu else 3)
  plan["latency_engines"] = list(args.latency_engines or engines)
  with open(os.path.join(work_dir, "plan.json"), "w") as f:
    json.dump(plan, f)
  log(f"engine_speed: prepared {len(timed)} engines in {time.time() - start:.0f} s")
  results = dict(skipped)
  for engine in timed:
    if not isolate and engine != "transformers":  # transformers: always its own interpreter
      result = time_engine(engine, plan, plan["runs"], _latency(args, plan, engine), args.threads)
      results[engine] = {"status": "ok", **result}
      continue
    if os.path.exists(os.path.join(work_dir, f"{engine}.json")):
      os.remove(os.path.join(work_dir, f"{engine}.json"))
    python = reference_python(args) if engine == "transformers" else sys.executable
    command = [
      python,
      os.path.abspath(__file__),
      f"--child={engine}",
      f"--work_dir={work_dir}",
      f"--threads={args.threads}",
      f"--latency_sentences={args.latency_sentences}",
      f"--runs={plan['runs']}",
    ]
    start = time.time()
    try:
      env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")]))
      env.update(_ct2_environment(engine, gpu))
      finished = subprocess.run(
        command, cwd=REPO, env=env, capture_output=True, text=True, timeout=child_timeout
      )
    except subprocess.TimeoutExpired:
      finished = None
    out = os.path.join(work_dir, f"{engine}.json")
    if finished is None and os.path.exists(out):  # throughput measured, latency cut short
      with open(out) as f:
        results[engine] = {"status": "ok", **json.load(f)}
      results[engine]["note"] = f"timed out after {child_timeout} s"
    elif finished is None:
      results[engine] = {"status": f"timed out after {child_timeout} s"}
    elif finished.returncode or not os.path.exists(out):
      lines = finished.stderr.strip().splitlines() or ["no output"]
      results[engine] = {"status": f"failed: {lines[-1][-400:]}"}
    else:
      with open(out) as f:
        results[engine] = {"status": "ok", **json.load(f)}
    log(f"engine_speed: {engine}: {results[engine]['status']} ({time.time() - start:.0f} s)")
    log(table_row(engine, results[engine], agreement(results)))
  return {"plan": plan, "results": results}


def agreement(results, reference="tfattn_graph"):
  """{engine: share of sentences whose output ids equal the reference engine's}."""
  if results.get(reference, {}).get("status") != "ok":
    return {}
  ours = results[reference]["outputs"]
  return {
    engine: sum(a == b for a, b in zip(ours, r["outputs"])) / len(ours)
    for engine, r in results.items()
    if r.get("status") == "ok"
  }


def table_row(engine, r, same):
  """One engine's line of the table (`same`: `agreement`'s shares)."""
  if r.get("status") != "ok":
    return f"{engine:<26} {r['status']}"
  p50 = f"{r['latency_p50_ms']:.1f}" if "latency_p50_ms" in r else "-"
  p90 = f"{r['latency_p90_ms']:.1f}" if "latency_p90_ms" in r else "-"
  agree = f"{same[engine]:.1%}" if engine in same else "-"
  return (
    f"{engine:<26} {r['tokens_per_second']:>9.1f} {r['best_seconds']:>7.2f} {r['tokens']:>7} "
    f"{p50:>9} {p90:>9} {r['peak_memory_mb']:>9.0f} {agree:>8}"
  )


def table(measured, device):
  plan, results = measured["plan"], measured["results"]
  ok = {e: r for e, r in results.items() if r.get("status") == "ok"}
  model = plan["marian_dir"] or plan["run_dir"]
  if plan["random_model"]:
    model = "base size, random weights"
  if plan["fixed_length"]:
    model += f", every output {plan['max_decoding_length']} tokens"
  lines = [
    f"\n{model}; {len(plan['sentences'])} sentences in batches of {plan['batch']}, beam "
    f"{plan['beam']}, length penalty 0; best of {plan['runs']} runs; {device}",
    f"{'engine':<26} {'tokens/s':>9} {'best s':>7} {'tokens':>7} {'b1 p50 ms':>9} "
    f"{'b1 p90 ms':>9} {'peak MiB':>9} {'same ids':>8}",
  ]
  same = agreement(results)
  lines += [table_row(engine, r, same) for engine, r in results.items()]
  for reference in ("ctranslate2_float32", "ctranslate2_float16", "transformers"):
    if reference in ok:
      for engine in (e for e in ok if e.startswith("tfattn")):
        ratio = ok[engine]["tokens_per_second"] / ok[reference]["tokens_per_second"]
        lines.append(f"- {engine} / {reference}: {ratio:.2f}x tokens/s")
  return "\n".join(lines)


def main(argv):
  del argv
  args = flags.FLAGS
  if args.child:
    run_child(args)
    return
  engines = check_args(args)
  cli.start_tensorflow_quietly()
  import common

  work_dir = args.work_dir or tempfile.mkdtemp(prefix="engine-speed-")
  os.makedirs(work_dir, exist_ok=True)
  try:
    measured = measure(args, engines, work_dir)
    print(table(measured, common.device_description()))
    if args.out_json:
      from train.files import write_json_atomically

      for r in measured["results"].values():
        r.pop("outputs", None)
      measured["plan"].pop("sentences")
      write_json_atomically(args.out_json, {"device": common.device_description(), **measured})
  finally:
    if not args.work_dir:
      shutil.rmtree(work_dir, ignore_errors=True)


if __name__ == "__main__":
  _define_flags()
  cli.run(main)
