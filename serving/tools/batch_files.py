"""Lines in, lines out for whole-file prediction: what `python -m serving.tools.predict` (one
process) and `python -m serving.tools.beam_predict` (Apache Beam) share. No TensorFlow here.

- Input: files, globs or a comma list of shards (or `-`, stdin), read as bytes and decoded
  line by line, so an invalid UTF-8 line is named by its `file:line` instead of failing a batch.
- Each line is a `Line`: which file, its 1-based number there, the text (or why it is bad).
- Output goes to chunk files `<output>.parts/<file>-<chunk>.txt`, each written whole under a
  temporary name and renamed into place, so a killed run leaves whole chunks only; `--resume`
  skips the input lines they cover. `join_chunks` concatenates them, in name order (= input
  order), into the output file, again through a rename.
"""

import glob
import json
import os
import sys
from typing import BinaryIO, Callable, Iterable, Iterator, List, NamedTuple, Optional, Sequence

STDIN = "-"
FAIL, SKIP = "fail", "skip"
BAD_LINE_POLICIES = (FAIL, SKIP)
SETTINGS_FILE = "settings.json"  # in the chunk folder: what the chunks were made with
# A line's sampling seed: --seed + its number + this much per earlier input file.
SEED_STRIDE_PER_FILE = 1_000_000_000


class Line(NamedTuple):
  """One input line.

  Attributes:
    file_index: which input file (0-based, in `expand_inputs` order).
    number: 1-based line number in that file.
    text: the text to predict on, or None when the line is bad.
    error: "" or why the line cannot be used (e.g. "not valid UTF-8 ...").
    where: "file:line", for messages.
  """

  file_index: int
  number: int
  text: Optional[str]
  error: str
  where: str


def expand_inputs(spec: str) -> List[str]:
  """`--input` -> the files to read, in order: a comma list whose items are files or globs
  (a glob's matches sorted), or `-` for stdin. A ValueError names an item that matches nothing."""
  if spec.strip() == STDIN:
    return [STDIN]
  files = []
  for item in (part.strip() for part in spec.split(",")):
    if not item:
      continue
    if item == STDIN:
      raise ValueError("--input=- (stdin) cannot be mixed with files")
    if glob.has_magic(item):
      matches = sorted(path for path in glob.glob(item) if os.path.isfile(path))
      if not matches:
        raise ValueError(f"--input pattern {item} matches no file")
      files.extend(matches)
    elif os.path.isdir(item):
      raise ValueError(f"--input {item} is a directory; give files or a glob like '{item}/*'")
    elif not os.path.isfile(item):
      raise ValueError(f"--input {item} does not exist")
    else:
      files.append(item)
  if not files:
    raise ValueError("--input names no file")
  return files


def open_input(path: str) -> BinaryIO:
  return sys.stdin.buffer if path == STDIN else open(path, "rb")


def read_lines(
  stream: Iterable[bytes], path: str, file_index: int, column: int = 0, start: int = 0
) -> Iterator[Line]:
  """The lines of one input as `Line`s, after the first `start` lines.

  Args:
    stream: the input's bytes, line by line (an open binary file).
    path: its name in messages ("<stdin>" for `-`).
    file_index: its position among the inputs.
    column: 0 = the whole line; N = the N-th TAB-separated field (1-based, as `cut -f`).
    start: lines to skip (already done by a run being resumed).
  """
  name = "<stdin>" if path == STDIN else path
  for number, raw in enumerate(stream, 1):
    if number <= start:
      continue
    raw = raw.rstrip(b"\n").rstrip(b"\r")
    where = f"{name}:{number}"
    try:
      text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
      yield Line(file_index, number, None, f"not valid UTF-8 (byte {error.start + 1})", where)
      continue
    if column:
      fields = text.split("\t")
      if len(fields) < column:
        yield Line(
          file_index, number, None, f"has {len(fields)} TAB field(s), --column={column}", where
        )
        continue
      text = fields[column - 1]
    yield Line(file_index, number, text, "", where)


def count_lines(path: str) -> int:
  """Lines in a file (the last may lack its newline), read in 1 MiB blocks: for the ETA."""
  count, last = 0, b"\n"
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      count += block.count(b"\n")
      last = block[-1:]
  return count + (last != b"\n")


def windows(lines: Iterable[Line], size: int) -> Iterator[List[Line]]:
  """Consecutive groups of `size` lines (the last may be shorter): what a chunk covers."""
  window = []
  for line in lines:
    window.append(line)
    if len(window) == size:
      yield window
      window = []
  if window:
    yield window


def batches(
  window: Sequence[Line],
  batch_size: int,
  sort: bool = True,
  length: Optional[Callable[[Line], int]] = None,
) -> List[List[Line]]:
  """The window's usable lines in batches of `batch_size`; with `sort`, shortest first by
  `length(line)` (default: its characters; `serving.tools.predict` passes the export's token
  count), so a batch's texts are alike in length: little padding, and a decoding loop that
  runs about as long for every row. The sort is stable: equal lengths keep their order."""
  usable = [line for line in window if line.text is not None]
  if sort:
    usable.sort(key=length or (lambda line: len(line.text)))
  return [usable[i : i + batch_size] for i in range(0, len(usable), batch_size)]


def seed_of(line: Line, base_seed: int) -> int:
  """A line's sampling seed: the same line gets the same sample in any batch, on any worker."""
  return base_seed + line.file_index * SEED_STRIDE_PER_FILE + line.number


def chunk_name(file_index: int, chunk_index: int) -> str:
  """Names sort in input order: file, then chunk."""
  return f"{file_index:05d}-{chunk_index:09d}.txt"


def parts_dir(output: str) -> str:
  return output + ".parts"


def chunk_bytes(outputs: Sequence[str]) -> bytes:
  return "".join(text + "\n" for text in outputs).encode("utf-8")


def write_atomically(path: str, data: bytes) -> None:
  """`data` to `path` through a temporary file and a rename: a reader (or a resumed run)
  sees the whole file or none of it."""
  temp = f"{path}.tmp-{os.getpid()}"
  with open(temp, "wb") as f:
    f.write(data)
    f.flush()
    os.fsync(f.fileno())
  os.replace(temp, path)


class ChunkDir:
  """`<output>.parts/`: the finished chunks of a run and the settings it was made with.

  Args:
    output: the output file of the run; its chunks live in `<output>.parts/`.
  """

  def __init__(self, output: str):
    self.path = parts_dir(output)

  def exists(self) -> bool:
    return os.path.isdir(self.path)

  def settings(self) -> Optional[dict]:
    path = os.path.join(self.path, SETTINGS_FILE)
    if not os.path.exists(path):
      return None
    with open(path) as f:
      return json.load(f)

  def start(self, settings: dict) -> None:
    os.makedirs(self.path, exist_ok=True)
    write_atomically(
      os.path.join(self.path, SETTINGS_FILE),
      json.dumps(settings, indent=2, sort_keys=True).encode(),
    )

  def done_chunks(self, file_index: int) -> int:
    """How many chunks of the file are finished, counted from its first (a run writes them in
    order, so a gap means the chunks after it are redone)."""
    names = set(os.listdir(self.path)) if self.exists() else set()
    done = 0
    while chunk_name(file_index, done) in names:
      done += 1
    return done

  def write(self, file_index: int, chunk_index: int, outputs: Sequence[str]) -> None:
    write_atomically(
      os.path.join(self.path, chunk_name(file_index, chunk_index)), chunk_bytes(outputs)
    )

  def chunk_files(self) -> List[str]:
    return sorted(
      os.path.join(self.path, name)
      for name in os.listdir(self.path)
      if name.endswith(".txt") and ".tmp-" not in name
    )

  def remove(self) -> None:
    for name in os.listdir(self.path):
      os.remove(os.path.join(self.path, name))
    os.rmdir(self.path)


def join_chunks(chunk_files: Sequence[str], output: str, opener: Callable = open) -> int:
  """Concatenates the chunk files (in the given order) into `output` through a temporary file
  and a rename, 1 MiB at a time; returns the bytes written."""
  temp, written = f"{output}.tmp-{os.getpid()}", 0
  with open(temp, "wb") as out:
    for path in chunk_files:
      with opener(path, "rb") as f:
        for block in iter(lambda f=f: f.read(1 << 20), b""):
          out.write(block)
          written += len(block)
    out.flush()
    os.fsync(out.fileno())
  os.replace(temp, output)
  return written
