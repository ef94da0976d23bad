"""Commands that moved in issue 40 (`serving/` split into export, server and tools): the old
name is a pointer that exits 2 naming the new one, and the new one exists."""

import glob
import importlib.util
import os
import runpy

import pytest

from train_helpers import REPO

MOVED = {
  "serving.client": "serving.tools.client",
  "serving.demo": "serving.tools.demo",
  "serving.attention": "serving.tools.attention_maps",
  "serving.predict": "serving.tools.predict",
  "serving.beam_predict": "serving.tools.beam_predict",
  "serving.check": "serving.export.check",
}


def test_every_module_left_at_the_top_of_serving_is_a_listed_pointer():
  top = {
    "serving." + os.path.basename(p)[: -len(".py")]
    for p in glob.glob(os.path.join(REPO, "serving", "*.py"))
  }
  assert top - {"serving.__init__"} == set(MOVED)


@pytest.mark.parametrize("old", sorted(MOVED))
def test_the_old_command_names_the_new_one_and_exits_2(old, capsys):
  with pytest.raises(SystemExit) as stopped:
    runpy.run_module(old, run_name="__main__")
  assert stopped.value.code == 2
  assert capsys.readouterr().err == f"{old}: error: moved; run python -m {MOVED[old]}\n"
  assert importlib.util.find_spec(MOVED[old]) is not None
  with pytest.raises(ImportError, match=MOVED[old]):
    importlib.import_module(old)
