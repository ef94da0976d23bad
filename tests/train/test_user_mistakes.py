"""Every user mistake a program can meet: one line on stderr naming the problem, exit status 2
(1 for a failure while running), no traceback, no TensorFlow start-up noise, and the files the
user had left as they were. One table; each row runs the real program in a subprocess.

The REST server's own mistakes are in tests/serving/server/test_server_cli.py.
"""

import concurrent.futures
import dataclasses
import os
import subprocess
import sys

import pytest

from train_helpers import REPO, environment, free_ports, own_lines, run_recording_imports, snapshot

# (id, argv after `python -m`, setup name or None, expected message fragment, exit status)
# "{tmp}" is the test's temporary directory; "{run}" the prepared run directory.
MISTAKES = [
  (
    "train-batch-size-0",
    ["train", "--batch_size=0", "--run_dir={tmp}/new"],
    None,
    "--batch_size must be positive, got 0",
    2,
  ),
  (
    "train-log-every-0",
    ["train", "--log_every=0", "--run_dir={tmp}/new"],
    None,
    "--log_every must be positive, got 0",
    2,
  ),
  (
    "train-negative-steps",
    ["train", "--train_steps=-5", "--run_dir={tmp}/new"],
    None,
    "--train_steps must be >= 0, got -5",
    2,
  ),
  (
    "train-dropout-1.5",
    ["train", "--dropout=1.5", "--run_dir={tmp}/new"],
    None,
    "--dropout must be in [0, 1), got 1.5",
    2,
  ),
  (
    "train-unknown-flag",
    ["train", "--batchsize=8"],
    None,
    "Unknown command line flag 'batchsize'",
    2,
  ),
  (
    "train-gpu-replicas-without-gpu",
    ["train", "--gpu_replicas=2", "--run_dir={tmp}/new"],
    None,
    "--gpu_replicas=2 splits a GPU, but TensorFlow sees none on this machine",
    2,
  ),
  (
    "train-steps-per-loop-0",
    ["train", "--steps_per_loop=0", "--run_dir={tmp}/new"],
    None,
    "--steps_per_loop must be positive, got 0",
    2,
  ),
  ("train-positional", ["train", "numbers"], None, "unexpected arguments ['numbers']", 2),
  ("train-unknown-recipe", ["train", "--recipe=imdb"], None, "--recipe", 2),
  (
    "train-tsv-without-file",
    ["train", "--task=tsv", "--run_dir={tmp}/new"],
    None,
    "--task=tsv needs --train_file",
    2,
  ),
  (
    "train-tsv-missing-file",
    ["train", "--task=tsv", "--train_file={tmp}/nope.tsv", "--run_dir={tmp}/new"],
    None,
    "{tmp}/nope.tsv does not exist",
    2,
  ),
  (
    "train-tsv-missing-eval-file",
    [
      "train",
      "--task=tsv",
      "--train_file={tmp}/good.tsv",
      "--eval_file={tmp}/nope-*.tsv",
      "--run_dir={tmp}/new",
    ],
    "good_tsv",
    "--validation_file: no file matches {tmp}/nope-*.tsv",  # --eval_file is its alias
    2,
  ),
  (
    "train-tsv-bad-utf8",
    ["train", "--task=tsv", "--train_file={tmp}/latin1.tsv", "--run_dir={tmp}/new"],
    "latin1_tsv",
    "{tmp}/latin1.tsv:2: not valid UTF-8",
    2,
  ),
  (
    "train-tsv-one-field",
    ["train", "--task=tsv", "--train_file={tmp}/one_field.tsv", "--run_dir={tmp}/new"],
    "one_field_tsv",
    "{tmp}/one_field.tsv:1: expected 2 tab-separated fields, got 1",
    2,
  ),
  (
    "train-resume-other-width",
    ["train", "--run_dir={run}", "--d_model=64"],
    "saved_run",
    "--d_model: 128 -> 64",
    2,
  ),
  (
    "train-resume-other-preset",
    ["train", "--run_dir={run}", "--model=base"],
    "saved_run",
    "--model: 'tiny' -> 'base'",
    2,
  ),
  (
    "train-export-path-is-file",
    ["train", "--run_dir={tmp}/new", "--export_base_path={tmp}/a_file"],
    "a_file",
    "--export_base_path={tmp}/a_file is a file",
    2,
  ),
  (
    "export-without-base-path",
    ["serving.export", "--run_dir={run}"],
    None,
    "--base_path is required",
    2,
  ),
  ("export-without-run", ["serving.export", "--base_path={tmp}/models"], None, "give --run_dir", 2),
  (
    "export-not-a-run",
    ["serving.export", "--run_dir={tmp}", "--base_path={tmp}/models"],
    None,
    "is not a training run directory",
    2,
  ),
  (
    "export-mistyped-checkpoint",
    ["serving.export", "--checkpoint={run}/checkpoints/ckpt-99", "--base_path={tmp}/models"],
    "exportable_run",
    "checkpoint {run}/checkpoints/ckpt-99 does not exist (kept checkpoints:",
    2,
  ),
  (
    "export-existing-version",
    ["serving.export", "--run_dir={run}", "--base_path={tmp}/models", "--version=1"],
    "existing_version",
    "{tmp}/models/1 already exists; versions are never overwritten",
    2,
  ),
  (
    "export-base-path-is-file",
    ["serving.export", "--run_dir={run}", "--base_path={tmp}/a_file"],
    "a_file",
    "--base_path={tmp}/a_file is a file",
    2,
  ),
  (
    "train-run-dir-is-a-file",
    ["train", "--run_dir={tmp}/a_file"],
    "a_file",
    "--run_dir={tmp}/a_file is a file",
    2,
  ),
  (
    "export-bad-batch-sizes",
    ["serving.export", "--run_dir={run}", "--base_path={tmp}/m", "--warmup_batch_sizes=1,x"],
    None,
    "--warmup_batch_sizes must be a comma-separated list of integers",
    2,
  ),
  ("check-no-directory", ["serving.export.check"], None, "give one SavedModel directory", 2),
  (
    "check-missing-directory",
    ["serving.export.check", "{tmp}/nope"],
    None,
    "{tmp}/nope is not a directory",
    2,
  ),
  ("client-nothing-to-send", ["serving.tools.client"], None, "nothing to send", 2),
  (
    "client-a-seed-per-text",
    ["serving.tools.client", "--signature_name=sample", "--text=1", "--text=2", "--seed=7"],
    None,
    "1 --seed for 2 --text",
    2,
  ),
  (
    "client-no-server",
    ["serving.tools.client", "--text=17", "--port={free_port}"],
    None,
    "cannot reach http://127.0.0.1:{free_port}/v1/models/tfattn",
    1,
  ),
]


def _write_saved_run(tmp, run):
  """A run directory as a first `python -m train` leaves it, without training it: the saved
  configuration is the built-in task's, resolved as the trainer resolves it."""
  from tfattn.support.run_dir import RunDir
  from train.run_config import RunConfig
  from train.task import BUILTIN_DEFAULTS

  config = RunConfig.of(run_dir=str(run), task="numbers")
  resolved = config.resolved(BUILTIN_DEFAULTS).replace(mixed_precision="float32", jit_compile=False)
  resolved.check()
  layout = RunDir(run)
  os.makedirs(layout.vocab)
  resolved.save(layout.run_config)
  with open(layout.model_config, "w") as f:
    f.write('{"d_model": 128}')
  with open(os.path.join(layout.vocab, "source.model"), "wb") as f:
    f.write(b"not read: the refusal comes first")


def _prepare(setup, tmp, run, trained_run):
  if setup == "latin1_tsv":
    (tmp / "latin1.tsv").write_bytes("4\tfour\nd\xe9j\xe0\tvu\n".encode("latin-1"))
  elif setup == "good_tsv":
    (tmp / "good.tsv").write_text("4\tfour\n")
  elif setup == "one_field_tsv":
    (tmp / "one_field.tsv").write_text("only one field\n")
  elif setup == "saved_run":
    _write_saved_run(tmp, run)
  elif setup == "a_file":
    (tmp / "a_file").write_text("the user's file")
  elif setup in ("exportable_run", "existing_version"):
    os.symlink(trained_run, run)
    if setup == "existing_version":
      os.makedirs(tmp / "models" / "1")
      (tmp / "models" / "1" / "saved_model.pb").write_bytes(b"the user's model")


def _run_program(argv):
  return subprocess.run(
    [sys.executable, "-m", *argv],
    cwd=REPO,
    # TensorFlow's C++ logging fully on: its lines (oneDNN notices on some CPUs) are there,
    # and the program's own output must still be one line.
    env=environment(TF_CPP_MIN_LOG_LEVEL="0"),
    capture_output=True,
    text=True,
    timeout=180,
  )


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory, trained_run):
  """Every row of MISTAKES run once, two programs at a time (each spends seconds importing
  TensorFlow on one core): {id: (result, message, folder, snapshot before, snapshot after)}."""
  prepared = {}
  for case_id, argv, setup, message, _ in MISTAKES:
    tmp = tmp_path_factory.mktemp(case_id)
    run = tmp / "run"
    _prepare(setup, tmp, run, trained_run)
    values = dict(tmp=tmp, run=run, free_port=free_ports(1)[0])
    prepared[case_id] = (
      [arg.format(**values) for arg in argv],
      message.format(**values),
      tmp,
      snapshot(tmp),
    )
  with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
    results = dict(zip(prepared, pool.map(_run_program, [p[0] for p in prepared.values()])))
  return {
    case_id: (results[case_id], message, tmp, before, snapshot(tmp))
    for case_id, (_, message, tmp, before) in prepared.items()
  }


@pytest.mark.slow
@pytest.mark.parametrize(
  "case_id,argv,status",
  [(case[0], case[1], case[4]) for case in MISTAKES],
  ids=[case[0] for case in MISTAKES],
)
def test_user_mistake_is_one_line_and_changes_nothing(outcomes, case_id, argv, status):
  result, message, tmp, before, after = outcomes[case_id]
  program = argv[0]
  assert result.returncode == status, result.stderr[-3000:]
  lines = own_lines(result.stderr)
  errors = [line for line in lines if line.startswith(f"{program}: error: ")]
  assert errors and errors == lines[-1:], result.stderr[-3000:]  # one line, the last one
  assert message in errors[0]
  assert "Traceback" not in result.stderr
  assert "cuInit" not in result.stderr  # quiet start on a machine without a GPU
  assert after == before  # nothing written, nothing left behind
  if program == "train":
    assert not os.path.exists(tmp / "new")


@pytest.mark.slow
def test_verbose_errors_adds_the_traceback_before_the_one_line(tmp_path):
  argv = ["train", "--task=tsv", f"--train_file={tmp_path}/nope.tsv", f"--run_dir={tmp_path}/r"]
  result = _run_program([*argv, "--verbose_errors"])
  assert result.returncode == 2
  assert "Traceback (most recent call last)" in result.stderr
  lines = own_lines(result.stderr)
  assert (
    lines[-1] == f"train: error: TSV file {tmp_path}/nope.tsv does not exist (or is not a file)"
  )


HELP_PROGRAMS = [
  "train",
  "serving.export",
  "serving.export.check",
  "serving.tools.client",
  "serving.server",
]


@pytest.fixture(scope="module")
def helps():
  """{program: (its --help, its --helpxml)}."""
  runs = [[p, h] for p in HELP_PROGRAMS for h in ("--help", "--helpxml")]
  with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
    results = list(pool.map(_run_program, runs))
  return {p: (results[2 * i], results[2 * i + 1]) for i, p in enumerate(HELP_PROGRAMS)}


@pytest.mark.slow
@pytest.mark.parametrize("program", HELP_PROGRAMS)
def test_help_lists_every_flag_and_exits_0(helps, program):
  """Every flag the program accepts (its --helpxml, less absl's own) is in its --help."""
  import xml.etree.ElementTree as ElementTree

  import settings
  from tfattn.decode_options import DecodeOptions
  from train.run_config import FLAGLESS, RunConfig

  result, xml = helps[program]
  assert result.returncode == 0 and xml.returncode == 0, result.stderr[-2000:]
  accepted = [
    flag.findtext("name")
    for flag in ElementTree.fromstring(xml.stdout).iter("flag")
    if not flag.findtext("file").startswith("absl.")
  ]
  if program == "train":  # every setting of a run is a flag
    every_setting = [
      settings.flag_name(f) for f, _ in settings.leaves(RunConfig) if f.name not in FLAGLESS
    ]
    assert set(every_setting) <= set(accepted)
  if program in ("train", "serving.export"):  # and every decoding option
    assert {settings.flag_name(f) for f in dataclasses.fields(DecodeOptions)} <= set(accepted)
  assert "verbose_errors" in accepted and len(accepted) > 1
  for flag in accepted:  # absl lists booleans as --[no]name
    assert f"  --{flag}:" in result.stdout or f"  --[no]{flag}:" in result.stdout, (
      flag,
      result.stdout[:3000],
    )
  assert "(default:" in result.stdout


@pytest.mark.slow
@pytest.mark.parametrize(
  "argv,message",
  [
    (["train", "--batch_size=0"], "train: error: --batch_size must be positive, got 0"),
    (
      ["serving.export", "--base_path={tmp}/models", "--run_dir={tmp}"],
      "serving.export: error: {tmp} is not a training run directory (missing task.json)",
    ),
    (
      ["train", "--task=text", "--train_file={tmp}/nope.txt", "--run_dir={tmp}/new"],
      "train: error: text file {tmp}/nope.txt does not exist (or is not a file)",
    ),
  ],
  ids=["train", "export", "train-data-file"],
)
def test_a_mistake_is_told_before_tensorflow_loads(tmp_path, argv, message):
  """The flags, the saved run and the paths are checked first: a mistake there costs a fraction
  of a second, not TensorFlow's import."""
  result, imported = run_recording_imports(["-m", *[a.format(tmp=tmp_path) for a in argv]])
  assert result.returncode == 2
  assert "cli" in imported and "tensorflow" not in imported
  assert own_lines(result.stderr)[-1] == message.format(tmp=tmp_path)
