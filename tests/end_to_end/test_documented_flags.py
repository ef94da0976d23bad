"""Every `--flag` that README.md and docs/*.md name exists in the program it belongs to.

A flag belongs to the program named last before it: in a command (code block lines joined at
their trailing backslashes) the command's program; in prose the program last named in the same
paragraph or table row (`python -m serving.server`, `serving.tools.client`, `benchmarks/x.py`,
`train: error:`). A flag no program is named for must exist in at least one program. Each
program's flags come from the program itself (`--helpxml`, its absl flags), and the programs are
found in the source tree (a module with a `__main__` guard), so a new program or flag needs no
edit here. Flags of other tools (TF Serving's own binary, docker, TensorBoard, tfds) are listed
below, each with the tool it belongs to.
"""

import concurrent.futures
import glob
import os
import re
import subprocess
import xml.etree.ElementTree as ElementTree

import pytest

import warm_start
from train_helpers import REPO, environment

pytestmark = pytest.mark.slow  # starts each documented program once (--helpxml)

# Flags the docs name that belong to another tool, not to one of our programs.
OTHER_TOOLS = {
  "docker": {"mount", "gpus"},  # `docker run --mount ... --gpus all` (docs/serving.md)
  "tensorboard": {"logdir"},  # `tensorboard --logdir runs/` (docs/training.md)
  "tfds": {"data_dir"},  # `tfds build NAME --data_dir=DIR` (docs/training.md, streamed_data.md)
  # TF Serving's own binary, run from the tensorflow/serving image (docs/serving.md's docker
  # commands, serving_conformance.md), checked against TF Serving's main.cc, not against ours.
  "tensorflow_model_server": {
    "xla_cpu_compilation_enabled",
    "enable_signature_method_name_check",
    "model_config_file",
    "allow_version_labels_for_unavailable_models",
    "enable_batching",
    "batching_parameters_file",
    "monitoring_config_file",
    "xla_gpu_compilation_enabled",  # since 2.18.0 (docs/serving_conformance.md, "XLA")
    "max_num_load_retries",  # its load retries (serving_conformance.md), which ours skips
    "load_retry_interval_micros",
  },
  # Beam's own pipeline options, given to serving.tools.beam_predict inside --beam_options='...'
  # (docs/batch_prediction.md): checked by Beam's PipelineOptions, not by our flags.
  "apache_beam": {
    "runner",
    "direct_num_workers",
    "direct_running_mode",
    "project",
    "region",
    "temp_location",
    "requirements_file",
    "extra_package",
    "flink_master",
    "spark_master_url",
    "environment_type",
  },
  "python -m build": {"sdist"},  # the source archive Beam's workers install
}
# Names that start a command or mention a tool whose flags follow (a `docker run` line passes
# the flags after the image name to tensorflow_model_server: both tools' flags are accepted).
OTHER_TOOL_PATTERNS = {
  r"\bdocker run\b": ("docker", "tensorflow_model_server"),
  r"\btensorboard\b": ("tensorboard",),
  r"\btfds build\b": ("tfds",),
  r"\btensorflow_model_server --": ("tensorflow_model_server",),
  r"--beam_options\b": ("serving.tools.beam_predict", "apache_beam"),
  r"\bpython -m build\b": ("python -m build",),
}
ABSL_HELP = {"help", "helpfull", "helpshort", "helpxml", "flagfile", "undefok"}
FLAG = re.compile(r"(?<![\w-])--(?:\[no\])?([a-z][a-z0-9_]*)")


def _programs():
  """{name as the docs write it: python's arguments that run it}, found in the source tree."""
  programs = {"train": ["-m", "train"]}
  paths = glob.glob(os.path.join(REPO, "serving", "**", "*.py"), recursive=True)
  paths += glob.glob(os.path.join(REPO, "train", "*.py"))  # python -m train.evaluate
  for path in sorted(paths):
    with open(path) as f:
      if 'if __name__ == "__main__"' in f.read() or path.endswith("__main__.py"):
        relative = os.path.relpath(path, REPO)[: -len(".py")]
        module = relative.replace(os.sep, ".").removesuffix(".__main__")
        programs[module] = ["-m", module]
  for path in sorted(glob.glob(os.path.join(REPO, "benchmarks", "*.py"))):
    with open(path) as f:
      if 'if __name__ == "__main__"' in f.read():
        programs["benchmarks/" + os.path.basename(path)] = [path]
  return programs


PROGRAMS = _programs()
PROGRAM_MENTION = re.compile(
  r"python -m (train(?:\.\w+)*|serving(?:\.\w+)+)\b"
  r"|(benchmarks/\w+\.py)"
  r"|`(serving(?:\.\w+)+)`"
  r"|^(train(?:\.\w+)*|serving(?:\.\w+)+): error:"
  r"|(" + "|".join(OTHER_TOOL_PATTERNS) + ")"
)


def _units(text):
  """(line number, text, is code, "## " section) of each command, paragraph and table row of a
  markdown file. A command is a code-block line and the lines its trailing backslashes join."""
  units, current, start, in_code, section = [], [], 0, False, ""

  def close():
    if current:
      units.append((start, "\n".join(current), in_code, section))
      current.clear()

  for number, line in enumerate(text.splitlines(), 1):
    if line.startswith("## ") and not in_code:
      close()
      section = line[3:].strip()
      continue
    if line.lstrip().startswith("```"):
      close()
      in_code = not in_code
      continue
    continued = in_code and current and current[-1].rstrip().endswith("\\")
    if not line.strip() or line.lstrip().startswith("|") or (in_code and not continued):
      close()
    if line.strip():
      if not current:
        start = number
      current.append(line)
      if line.lstrip().startswith("|"):  # a table row is a unit of its own
        close()
  close()
  return units


SENTENCE_END = re.compile(r"\.(?=\s|$)")


def _owner(match):
  if match.group(5):
    for pattern, tools in OTHER_TOOL_PATTERNS.items():
      if re.search(pattern, match.group(5)):
        return tools
  name = next(g for g in match.groups()[:4] if g)
  return (name,) if name in PROGRAMS else None


# Where a sentence names no program, the flag belongs to its section's programs: {doc: {"##"
# section title's start ("" for the text before the first section): programs}}. A section not
# listed here takes a flag of any program.
SECTION_PROGRAMS = {
  "README.md": {
    "Train on your own data": ("train",),
    "Serve it": (
      "serving.export",
      "serving.server",
      "serving.tools.client",
      "serving.export.check",
    ),
    "Speed": ("train", "serving.export", "serving.server"),
  },
  "docs/training.md": {"": ("train",)},
  "docs/streamed_data.md": {"": ("train",)},
  # The GPU pass runs `python -m train` with the flags it names.
  "docs/gpu_loop.md": {"": ("train",), "The GPU pass": ("benchmarks/gpu_pass.py", "train")},
  "docs/language_model.md": {
    "": ("train",),
    "Evaluate a checkpoint": ("train.evaluate", "train"),
    "Export and serve": ("serving.export",),
    "Score": ("serving.tools.client", "serving.server"),
  },
  "docs/serving.md": {
    "": (
      "serving.export",
      "serving.server",
      "serving.tools.client",
      "serving.export.check",
      "tensorflow_model_server",
    ),
    "Attention maps": ("serving.tools.attention_maps",),
    "With the real TensorFlow Serving": (
      "serving.export",
      "serving.server",
      "tensorflow_model_server",
      "docker",
    ),
  },
  "docs/serving_conformance.md": {"": ("serving.server", "tensorflow_model_server")},
}


def _home(doc, section):
  homes = SECTION_PROGRAMS.get(doc, {})
  starts = [start for start in homes if section.startswith(start)]
  return homes[max(starts, key=len)] if starts else None


def documented_flags():
  """[(doc, line, flag, owners)]: owners is a tuple of programs/tools, or None (any program)."""
  found = []
  docs = [os.path.join(REPO, "README.md"), *sorted(glob.glob(os.path.join(REPO, "docs", "*.md")))]
  for doc in docs:
    with open(doc) as f:
      text = f.read()
    doc = os.path.relpath(doc, REPO)
    for start, unit, code, section in _units(text):
      home = _home(doc, section)
      owner = None
      for number, line in enumerate(unit.splitlines(), start):
        events = [(m.start(), "program", m) for m in PROGRAM_MENTION.finditer(line)]
        events += [(m.start(), "flag", m) for m in FLAG.finditer(line)]
        if not code:  # in prose a program owns the flags of its own sentence
          events += [(m.start(), "sentence", m) for m in SENTENCE_END.finditer(line)]
        for _, kind, match in sorted(events, key=lambda e: e[0]):
          if kind == "sentence":
            owner = None
          elif kind == "program":
            owner = _owner(match) or owner
          else:
            found.append((doc, number, match.group(1), owner or home))
  return found


def _flags_of(program):
  result = subprocess.run(
    [*warm_start.python(), *PROGRAMS[program], "--helpxml"],
    cwd=REPO,
    env=environment(),
    capture_output=True,
    text=True,
    timeout=180,
  )
  assert result.returncode == 0, (program, result.stderr[-2000:])
  names = {flag.findtext("name") for flag in ElementTree.fromstring(result.stdout).iter("flag")}
  assert names, program
  return names | ABSL_HELP


@pytest.fixture(scope="module")
def program_flags():
  """{program: its flags}, for every program the docs name a flag for (each started once)."""
  named = {o for *_, owners in documented_flags() if owners for o in owners if o in PROGRAMS}
  named |= {
    "train",
    "serving.server",
    "serving.export",
    "serving.tools.client",
  }  # for unowned flags
  with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
    return dict(zip(sorted(named), pool.map(_flags_of, sorted(named))))


def test_the_docs_parser_finds_flags_and_their_programs():
  by_flag = {(doc, flag, owners) for doc, _, flag, owners in documented_flags()}
  serving_md = SECTION_PROGRAMS["docs/serving.md"][""]
  assert ("docs/serving.md", "grpc_socket_path", serving_md) in by_flag  # the flag table
  assert ("README.md", "signature_name", ("serving.tools.client",)) in by_flag
  assert ("docs/serving.md", "warmup_batch_sizes", ("serving.export",)) in by_flag
  assert ("docs/serving.md", "mount", ("docker", "tensorflow_model_server")) in by_flag
  assert len(by_flag) > 150


def test_every_documented_flag_exists_in_its_program(program_flags):
  other_tools = set().union(*OTHER_TOOLS.values())
  any_program = set().union(*program_flags.values())
  problems = []
  for doc, line, flag, owners in documented_flags():
    ours = [o for o in owners or () if o in PROGRAMS]
    tools = [o for o in owners or () if o in OTHER_TOOLS]
    if ours and flag in set().union(*(program_flags[o] for o in ours)):
      continue
    if tools and any(flag in OTHER_TOOLS[t] for t in tools):
      continue
    if not owners and (flag in any_program or flag in other_tools):
      continue
    where = f"{' or '.join(owners)} has no such flag" if owners else "no program has it"
    problems.append(f"{doc}:{line} names --{flag}, but {where} (--helpxml)")
  assert not problems, "\n".join(problems)
