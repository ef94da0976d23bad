"""Every graph of ours is written with TensorFlow's own control flow (`tf.while_loop`,
`tf.cond`), so each `tf.function` turns AutoGraph off: its source conversion of every function a
trace calls cost seconds of each training start, evaluation and export (an export of the tiny
test model: 6 s with it, 2 s without; WORKSPACE_NOTES), and a Python `if` or `for` on a tensor
then fails at trace time instead of being rewritten behind the reader's back."""

import ast
import glob
import os

from train_helpers import REPO


def _tf_function_uses():
  """(file, line, whether AutoGraph is turned off) of every `tf.function` in our code."""
  for pattern in ("tfattn/**/*.py", "train/*.py", "serving/**/*.py", "benchmarks/*.py"):
    for path in sorted(glob.glob(os.path.join(REPO, pattern), recursive=True)):
      with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
      parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
      for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and ast.unparse(node) == "tf.function":
          call = parents.get(node)
          keywords = call.keywords if isinstance(call, ast.Call) and call.func is node else []
          off = any(
            k.arg == "autograph" and isinstance(k.value, ast.Constant) and k.value.value is False
            for k in keywords
          )
          yield os.path.relpath(path, REPO), node.lineno, off


def test_every_tf_function_turns_autograph_off():
  uses = list(_tf_function_uses())
  assert {"train/trainer.py", "serving/export/modules.py", "tfattn/text.py"} <= {u[0] for u in uses}
  assert [f"{path}:{line}" for path, line, off in uses if not off] == []
