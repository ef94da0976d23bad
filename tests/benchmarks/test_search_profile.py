"""benchmarks/search_profile.py at a tiny size: the finished-row waste, the op profile, the
compaction policies (beam and greedy) on a random model, and the export comparison on a tiny
trained run."""

import types

import pytest
import search_profile

from train_helpers import own_lines, run_recording_imports


def _args(**changes):
  values = dict(
    run_dir=None,
    texts_file=None,
    size="tiny",
    vocab_size=40,
    source_lengths=("1", "9"),
    sentences=12,
    batch=4,
    beam=2,
    order=["sorted", "unsorted"],
    policies=["never", "1.0", "0.5"],
    exports=[],
    rounds=1,
  )
  values.update(changes)
  return types.SimpleNamespace(**values)


@pytest.mark.parametrize("beam", [2, 1])
def test_waste_profile_and_policies_on_a_tiny_random_model(beam, temp_folder_left_empty):
  args = _args(beam=beam)
  model, rows, base = search_profile._model_and_sentences(args)
  options = search_profile._options(args, base)
  lines = []
  waste = search_profile.waste(args, model, rows, options, log=lines.append)
  # Each output runs to its own limit (source length + 20, END ruled out): in unsorted batches
  # of lengths 1..9 some rows wait for others.
  assert 0 < waste["unsorted"] < 1 and 0 <= waste["sorted"] <= waste["unsorted"]
  shares = search_profile.op_shares(args, model, rows, options, "never", log=lines.append)
  assert 0.99 < sum(v for k, v in shares.items() if not k.startswith("scope:")) < 1.01
  assert (shares["scope:reorder_beams"] > 0) == (beam > 1)  # greedy reorders nothing
  table = search_profile.policy_table(args, model, rows, options, log=lines.append)
  for order in args.order:
    assert sorted(table[order]) == sorted(args.policies)
    assert len({tokens for _, _, tokens in table[order].values()}) == 1  # the same outputs
    assert all(wall > 0 and cpu > 0 for wall, cpu, _ in table[order].values())
  assert any("waste" in line for line in lines) and any("tokens/s" in line for line in lines)


@pytest.mark.slow  # the session's export (made once for the suite's tests)
def test_exports_are_timed_side_by_side(trained_run, exported, tmp_path):
  path = str(exported[1])
  texts = tmp_path / "texts.txt"
  texts.write_text("1 2 3\n4 5\n6\n7 8 9 10\n11 12\n")
  args = _args(run_dir=str(trained_run), texts_file=str(texts), exports=[f"a={path}", f"b={path}"])
  _, rows, _ = search_profile._model_and_sentences(args)
  lines = []
  table = search_profile.export_table(args, rows, log=lines.append)
  for order in args.order:
    (_, _, a), (_, _, b) = table[order]["a"], table[order]["b"]
    assert a == b > 0
  assert len(lines) == 4


@pytest.mark.slow  # starts the program three times
def test_a_count_below_its_minimum_is_one_line_before_tensorflow():
  """--rounds=0 was accepted and ran the whole profile (301 CPU s on the 2-core CPU); a count
  below its minimum is one line now, told before TensorFlow starts."""
  for flag, message in (
    ("--rounds=0", "--rounds must be >= 1, got 0"),
    ("--batch=0", "--batch must be >= 1, got 0"),
    ("--threads=-1", "--threads must be >= 0, got -1"),
  ):
    result, imported = run_recording_imports(["benchmarks/search_profile.py", flag])
    assert result.returncode == 2
    assert "cli" in imported and "tensorflow" not in imported
    assert own_lines(result.stderr)[-1] == f"search_profile.py: error: {message}"
