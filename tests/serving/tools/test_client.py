"""serving/tools/client.py's request rows (the REST and gRPC round trips are in the server's
tests and tests/end_to_end/test_language_model_pipeline.py)."""

import types

from serving.tools import client


def _flags(text, seed=(), max_new_tokens=None):
  return types.SimpleNamespace(text=list(text), seed=list(seed), max_new_tokens=max_new_tokens)


def test_rows_are_texts_or_objects_with_a_seed_each_and_the_length_for_every_text():
  assert client._instances(_flags(["a", "b"])) == ["a", "b"]
  assert client._instances(_flags(["a", "b"], seed=[1, 2])) == [
    {"text": "a", "seed": 1},
    {"text": "b", "seed": 2},
  ]
  assert client._instances(_flags(["a", ""], max_new_tokens=200)) == [
    {"text": "a", "max_new_tokens": 200},
    {"text": "", "max_new_tokens": 200},
  ]
  assert client._instances(_flags(["a"], seed=[7], max_new_tokens=3)) == [
    {"text": "a", "seed": 7, "max_new_tokens": 3}
  ]
