"""serving/tools/batch_files.py: inputs, numbered lines, bad lines, windows, sorted batches and the
chunk folder that makes whole-file prediction resumable."""

import os

import pytest

from serving.tools import batch_files
from serving.tools.batch_files import Line


def _lines(data: bytes, column=0, start=0):
  return list(batch_files.read_lines(data.splitlines(keepends=True), "in.txt", 3, column, start))


def test_inputs_are_files_globs_and_comma_lists_in_order(tmp_path):
  for name in ("b.txt", "a.txt", "c.tsv"):
    (tmp_path / name).write_text("x\n")
  assert batch_files.expand_inputs(f"{tmp_path}/*.txt,{tmp_path}/c.tsv") == [
    f"{tmp_path}/a.txt",
    f"{tmp_path}/b.txt",
    f"{tmp_path}/c.tsv",
  ]
  assert batch_files.expand_inputs(" - ") == [batch_files.STDIN]
  for spec, message in (
    (f"{tmp_path}/*.de", "matches no file"),
    (f"{tmp_path}/missing.txt", "does not exist"),
    (str(tmp_path), "is a directory"),
    (f"{tmp_path}/a.txt,-", "cannot be mixed"),
  ):
    with pytest.raises(ValueError, match=message):
      batch_files.expand_inputs(spec)


def test_lines_are_numbered_and_bad_ones_named_by_file_and_line():
  lines = _lines(b"Ein Hund.\r\n\n\xff\xfe kaputt\nzwei\tfelder\nletzte ohne newline")
  assert [line.number for line in lines] == [1, 2, 3, 4, 5]
  assert lines[0] == Line(3, 1, "Ein Hund.", "", "in.txt:1")
  assert lines[1].text == ""  # an empty line is a line: its answer keeps the output aligned
  assert lines[2].text is None and "not valid UTF-8" in lines[2].error
  assert lines[2].where == "in.txt:3"
  assert lines[4].text == "letzte ohne newline"
  second = _lines(b"a\tb\nnur eins\n", column=2)
  assert second[0].text == "b"
  assert second[1].text is None and "1 TAB field(s), --column=2" in second[1].error
  assert [line.number for line in _lines(b"1\n2\n3\n4\n", start=2)] == [3, 4]


def test_count_lines_counts_a_last_line_without_newline(tmp_path):
  for data, expected in ((b"", 0), (b"a\n", 1), (b"a\nb", 2), (b"a\n\n", 2)):
    (tmp_path / "f").write_bytes(data)
    assert batch_files.count_lines(str(tmp_path / "f")) == expected


def test_windows_and_length_sorted_batches():
  texts = ["ccc", "a", None, "bbbbbb", "dd", "e"]
  lines = [
    Line(0, i + 1, text, "" if text else "bad", f"f:{i + 1}") for i, text in enumerate(texts)
  ]
  assert [len(window) for window in batch_files.windows(iter(lines), 4)] == [4, 2]
  sorted_batches = batch_files.batches(lines, 2, sort=True)
  assert [[line.text for line in batch] for batch in sorted_batches] == [
    ["a", "e"],
    ["dd", "ccc"],
    ["bbbbbb"],
  ]
  in_order = batch_files.batches(lines, 2, sort=False)
  assert [[line.text for line in batch] for batch in in_order] == [
    ["ccc", "a"],
    ["bbbbbb", "dd"],
    ["e"],
  ]
  # Another length (the command passes the export's token count); equal lengths keep their order.
  tokens = {"ccc": 1, "a": 3, "bbbbbb": 1, "dd": 2, "e": 3}
  by_tokens = batch_files.batches(lines, 2, sort=True, length=lambda line: tokens[line.text])
  assert [[line.text for line in batch] for batch in by_tokens] == [
    ["ccc", "bbbbbb"],
    ["dd", "a"],
    ["e"],
  ]


def test_a_lines_seed_depends_on_the_line_alone():
  line = Line(2, 7, "x", "", "f:7")
  assert batch_files.seed_of(line, 5) == 5 + 7 + 2 * batch_files.SEED_STRIDE_PER_FILE
  assert batch_files.seed_of(line._replace(file_index=0), 5) != batch_files.seed_of(line, 5)


def test_chunks_are_whole_counted_in_order_and_joined(tmp_path):
  output = str(tmp_path / "out.txt")
  chunks = batch_files.ChunkDir(output)
  assert not chunks.exists() and chunks.done_chunks(0) == 0
  chunks.start({"window": 2})
  assert chunks.settings() == {"window": 2}
  chunks.write(0, 0, ["a", "b"])
  chunks.write(0, 1, ["c"])
  chunks.write(0, 3, ["after a gap"])  # not counted: the chunk before it is missing
  chunks.write(1, 0, ["d", ""])
  # A killed writer leaves at most a temporary file, which is neither counted nor joined.
  (tmp_path / "out.txt.parts" / "00000-000000002.txt.tmp-1").write_text("half")
  assert chunks.done_chunks(0) == 2 and chunks.done_chunks(1) == 1
  files = [os.path.basename(path) for path in chunks.chunk_files()]
  assert files == [
    "00000-000000000.txt",
    "00000-000000001.txt",
    "00000-000000003.txt",
    "00001-000000000.txt",
  ]
  written = batch_files.join_chunks(chunks.chunk_files(), output)
  with open(output, encoding="utf-8") as f:
    assert f.read() == "a\nb\nc\nafter a gap\nd\n\n"
  assert written == os.path.getsize(output)
  chunks.remove()
  assert not chunks.exists()
  assert sorted(os.listdir(tmp_path)) == ["out.txt"]  # no temporary file left
