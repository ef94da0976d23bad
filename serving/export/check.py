"""`python -m serving.export.check DIR`: will TF Serving (<= 2.19) load this SavedModel?

Reads the ops of the graph and of every function in it, and fails naming any op that is neither
TF core nor a TF-Text op linked into TF Serving 2.12-2.19 (which embed TF-Text 2.12.1). Then
loads the version as the server does (`serving.server`'s `Servable`: the `serve` MetaGraph in a
Session) and replays its warm-up records: TF Serving refuses to load a version whose warm-up
request fails, so check fails naming the request and the model's error. Prints
one line per version: OK or FAIL, the op count, the signatures, and whether the export holds XLA
must-compile functions (and what each TF Serving build needs for them: CPU images
--xla_cpu_compilation_enabled=true, GPU images >= 2.18 --xla_gpu_compilation_enabled=true, GPU
images <= 2.17 cannot serve them). `--verbose` prints, per
version, every op, each signature (inputs -> outputs, dtypes and shapes) and
`saved_model_cli show --all`. DIR is a version directory or a base path (checks every version).
Exit status 1 when a version fails.
"""

import cli

import dataclasses
import json
import os
import subprocess
import sys

from absl import flags

from serving.export.destination import EXPORT_INFO_FILE
from serving.tf_serving import versions, xla_compilation
from settings import setting


@dataclasses.dataclass(frozen=True)
class CheckFlags:
  """The flags of `python -m serving.export.check`."""

  verbose: bool = setting(
    False,
    "Per version, print every op, each signature with its dtypes and shapes, and saved_model_cli's "
    "full dump (default: one line per version).",
  )
  warmup: bool = setting(
    True,
    "Load each version as the server does and replay its warm-up records (TF Serving refuses "
    "a version whose warm-up request fails); --nowarmup checks the ops only (an XLA export's "
    "replay compiles every program its records ask for).",
  )


cli.define_flags(CheckFlags)

# TF-Text ops that TF Serving 2.12-2.19 links (TF-Text 2.12.1's ops_lib).
SERVING_TEXT_OPS = frozenset(
  {
    "CaseFoldUTF8",
    "NormalizeUTF8",
    "NormalizeUTF8WithOffsetsMap",
    "RegexSplitWithOffsets",
    "WordpieceTokenizeWithOffsets",
    "FastWordpieceTokenizeWithOffsets",
    "TFText>FastWordpieceDetokenize",
    "FastBertNormalize",
    "WhitespaceTokenizeWithOffsets",
    "UnicodeScriptTokenizeWithOffsets",
    "SentencepieceOp",
    "SentencepieceTokenizeOp",
    "SentencepieceTokenizeWithOffsetsOp",
    "SentencepieceDetokenizeOp",
    "SentencepieceVocabSizeOp",
    "SentencepieceIdToStringOp",
    "SentencepieceStringToIdOp",
    "SplitMergeTokenizeWithOffsets",
    "SplitMergeFromLogitsTokenizeWithOffsets",
    "TokenizerFromLogits",
    "NgramsStringJoin",
    "SentenceFragments",
    "ConstrainedSequence",
    "MaxSpanningTree",
    "RougeL",
    "TFText>WhitespaceTokenizeWithOffsetsV2",
    "TFText>WhitespaceTokenizerConfigBuilder",
  }
)
# In TF-Text after 2.12.1 only: a SavedModel using them fails to load in TF Serving < 2.20.
UNSAFE_BEFORE_2_20 = frozenset(
  {"TFText>RoundRobinTrim", "TFText>RoundRobinGenerateMasks", "TFText>Utf8Binarize"}
)
# Graph-construction pseudo-ops that appear in function bodies but are not kernels.
_PSEUDO_OPS = frozenset({"_Arg", "_Retval", "NoOp"})


def core_ops():
  import tensorflow as tf

  return set(dir(tf.raw_ops)) | _PSEUDO_OPS


def read_saved_model(saved_model_dir):
  """The `saved_model.pb` of a SavedModel directory, parsed."""
  from tensorflow.core.protobuf import saved_model_pb2

  proto = saved_model_pb2.SavedModel()
  with open(os.path.join(saved_model_dir, "saved_model.pb"), "rb") as f:
    proto.ParseFromString(f.read())
  return proto


def saved_model_ops(saved_model_dir):
  """-> {op name: sorted names of the functions using it ('<graph>' for the main graph)}."""
  used = {}
  for meta_graph in read_saved_model(saved_model_dir).meta_graphs:
    for node in meta_graph.graph_def.node:
      used.setdefault(node.op, set()).add("<graph>")
    for function in meta_graph.graph_def.library.function:
      for node in function.node_def:
        used.setdefault(node.op, set()).add(function.signature.name)
  return {op: sorted(users) for op, users in sorted(used.items())}


def _tensor_text(name, info):
  """`text: string [None]` for a signature's TensorInfo (-1 dimensions shown as None)."""
  from tensorflow.python.framework import dtypes

  if info.tensor_shape.unknown_rank:
    shape = "[?]"
  else:
    shape = (
      "[" + ", ".join("None" if d.size < 0 else str(d.size) for d in info.tensor_shape.dim) + "]"
    )
  return f"{name}: {dtypes.as_dtype(info.dtype).name} {shape}"


def signature_lines(saved_model_dir):
  """One readable line per signature, sorted by name:
  `translate_nbest(text: string [None]) -> log_prob: float32 [None, None], ...`."""
  lines = []
  for meta_graph in read_saved_model(saved_model_dir).meta_graphs:
    for name, signature in sorted(meta_graph.signature_def.items()):
      if name.startswith("__"):  # e.g. __saved_model_init_op
        continue
      inputs = ", ".join(_tensor_text(k, v) for k, v in sorted(signature.inputs.items()))
      outputs = ", ".join(_tensor_text(k, v) for k, v in sorted(signature.outputs.items()))
      lines.append(f"{name}({inputs}) -> {outputs}")
  return lines


def must_compile_functions(saved_model_dir):
  """Names of the functions marked `jit_compile=True` (attribute `_XlaMustCompile`). TF
  Serving refuses to compile them unless started with an XLA flag (model_servers/main.cc:337,
  both default false); see xla_compilation.TF_SERVING_NEEDS."""
  return sorted(
    {
      function.signature.name
      for meta_graph in read_saved_model(saved_model_dir).meta_graphs
      for function in meta_graph.graph_def.library.function
      if function.attr["_XlaMustCompile"].b
    }
  )


def problems(saved_model_dir):
  """Human-readable reasons TF Serving <= 2.19 would fail to load the SavedModel."""
  core = core_ops()
  found = []
  for op, users in saved_model_ops(saved_model_dir).items():
    if op in UNSAFE_BEFORE_2_20:
      found.append(f"op {op} needs TF-Text >= 2.20 (TF Serving 2.20+); used in {users[0]}")
    elif op not in core and op not in SERVING_TEXT_OPS:
      found.append(f"op {op} is neither TF core nor linked into TF Serving; used in {users[0]}")
  return found


def _version_dirs(path):
  """`path` itself when it is a SavedModel, else its versions, newest first."""
  if not os.path.isdir(path):
    raise ValueError(f"{path} is not a directory: give a SavedModel directory or a model base path")
  if os.path.exists(os.path.join(path, versions.SAVED_MODEL_FILE)):
    return [path]
  dirs = [os.path.join(path, str(v)) for v in reversed(versions.version_numbers(path))]
  if not dirs:
    raise ValueError(f"{path} holds no SavedModel (saved_model.pb) nor numeric versions")
  return dirs


def warmup_problem(directory):
  """Why the version's warm-up records fail as the server replays them at load (the first
  failing request: its number, signature and the model's error), or None when they all answer
  (or there are none). TF Serving and `serving.server` do not load such a version."""
  from serving.server.errors import StatusError
  from serving.server.model_manager import Servable
  from serving.tf_serving import warmup

  path = os.path.join(directory, warmup.WARMUP_FILE)
  if not os.path.exists(path):
    return None
  records = warmup.read_warmup_file(path)
  servable = Servable("check", 0, directory)
  try:
    for number, (signature, inputs) in enumerate(records, 1):
      try:
        servable.run(signature, inputs)
      except StatusError as error:
        reason = (error.message.strip().splitlines() or [""])[0][:300]
        return (
          f"warm-up request {number} of {len(records)} ({signature}) fails with {error.code}: "
          f"{reason} (the server would not load this version)"
        )
  finally:
    servable.session.close()
  return None


def summary_line(directory, replay_warmup=True):
  """One line for a version: OK or FAIL (naming the ops TF Serving lacks, or with
  `replay_warmup` the warm-up request that fails), its op count, its signatures, and what XLA
  needs."""
  found = problems(directory)
  if replay_warmup and not found:  # the ops load: replay the warm-up records as the server will
    found = [problem for problem in [warmup_problem(directory)] if problem]
  signatures = [line.split("(", 1)[0] for line in signature_lines(directory)]
  compiled = must_compile_functions(directory)
  xla = (
    f"XLA: {len(compiled)} function(s) must compile: {xla_compilation.TF_SERVING_NEEDS}"
    if compiled
    else "XLA: none must compile (TF Serving CPU and GPU images load it with no flag)"
  )
  verdict = (
    f"FAIL {directory}: " + "; ".join(found)
    if found
    else f"OK {directory}: {len(saved_model_ops(directory))} ops, all TF core or TF-Text that "
    "TF Serving <= 2.19 links" + (", warm-up requests answer" if replay_warmup else "")
  )
  return f"{verdict}; signatures: {', '.join(signatures)}; {_precision(directory)}{xla}"


def _precision(directory):
  """What a tfattn export computes in ("computes in bfloat16, weights bfloat16; "), from its
  export info; "" for another SavedModel or an export written before it was recorded."""
  path = os.path.join(directory, EXPORT_INFO_FILE)
  if not os.path.exists(path):
    return ""
  with open(path) as f:
    info = json.load(f)
  compute = info.get("compute_dtype") or (info.get("model_config") or {}).get("compute_dtype")
  if not compute:
    return ""
  return f"computes in {compute}, weights {info.get('weights_dtype', 'float32')}; "


def _print_details(directory):
  """The --verbose dump of one version; False when saved_model_cli could not read it."""
  ops = saved_model_ops(directory)
  print(f"== {directory}: {len(ops)} distinct ops")
  for op, users in ops.items():
    print(f"  {op:40s} {len(users)} function(s)")
  print("signatures:")
  for line in signature_lines(directory):
    print(f"  {line}")
  # The module, not the console script: the script is missing where TensorFlow was
  # installed with `pip --target` or is not beside sys.executable.
  shown = subprocess.run(
    [
      sys.executable,
      "-m",
      "tensorflow.python.tools.saved_model_cli",
      "show",
      "--dir",
      directory,
      "--all",
    ],
    capture_output=True,
    text=True,
  )
  print(shown.stdout)
  if shown.returncode:
    print(f"saved_model_cli failed:\n{shown.stderr[-2000:]}")
  compiled = must_compile_functions(directory)
  if compiled:
    from serving.tf_serving import warmup  # (TensorFlow is loaded by now)

    warmed = os.path.exists(os.path.join(directory, warmup.WARMUP_FILE))
    print(
      f"XLA: {len(compiled)} function(s) must be compiled with XLA ({', '.join(compiled)}).\n"
      f"  TF Serving CPU images, any version: start tensorflow_model_server with "
      f"{xla_compilation.CPU_FLAG}.\n"
      f"  GPU images >= 2.18: {xla_compilation.GPU_FLAG} (either flag lifts the switch).\n"
      "  GPU images <= 2.17: cannot serve it (no XLA:GPU compiler linked: UNIMPLEMENTED "
      "Could not find compiler for platform CUDA).\n"
      "  Without a flag every compilation fails with INTERNAL 'XLA compilation disabled': "
      + (
        "this version has warm-up records, so it fails to load and the server does not start."
        if warmed
        else "this version has no warm-up records, so it loads and each request that "
        "compiles answers that error (HTTP 500)."
      )
    )
  return shown.returncode == 0


def main(argv):
  if len(argv) != 2:
    raise cli.UsageError(
      "give one SavedModel directory or model base path: python -m serving.export.check DIR"
    )
  try:
    dirs = _version_dirs(argv[1])
  except ValueError as error:
    raise cli.UsageError(str(error)) from None
  cli.start_tensorflow_quietly()  # the arguments are good: now TensorFlow, quietly
  failed = False
  for directory in dirs:
    if flags.FLAGS.verbose and not _print_details(directory):
      failed = True
    line = summary_line(directory, flags.FLAGS.warmup)
    failed = failed or line.startswith("FAIL")
    print(line, flush=True)
  return 1 if failed else 0


if __name__ == "__main__":
  cli.run(main, arguments="DIR")
