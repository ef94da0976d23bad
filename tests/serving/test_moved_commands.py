"""Commands that moved in issue 40 (`serving/` split into export, server and tools). Their
pointers at the old names are gone (issue 49); the README's "Removed names" says where each
went, and the new one exists."""

import glob
import importlib.util
import os

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


def test_no_module_is_left_at_the_top_of_serving():
  top = {
    "serving." + os.path.basename(p)[: -len(".py")]
    for p in glob.glob(os.path.join(REPO, "serving", "*.py"))
  }
  assert top == {"serving.__init__"}


@pytest.mark.parametrize("old", sorted(MOVED))
def test_the_readme_names_the_new_home_of_each_removed_name(old):
  assert not os.path.exists(os.path.join(REPO, *old.split(".")) + ".py")
  assert importlib.util.find_spec(MOVED[old]) is not None
  with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
    removed = f.read().split("### Removed names", 1)[1]
  assert f"`{old}` -> `{MOVED[old]}`" in removed
