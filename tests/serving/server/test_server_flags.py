"""serving.server's flags are read once into a typed ServerFlags (issue 49), as train's are."""

import re

from absl import flags

from serving.server import server_flags


def _parsed(*argv):
  values = flags.FlagValues()
  server_flags.define(values)
  values(["serving.server", *argv])
  return values


def test_the_flags_become_one_typed_object():
  values = _parsed("--model_base_path=/m", "--port=0", "--versions=1,2", "--enable_batching")
  options = server_flags.read(values)
  assert isinstance(options, server_flags.ServerFlags)
  assert (options.model_base_path, options.port, options.enable_batching) == ("/m", 0, True)
  assert options.versions == ("1", "2") and options.rest_api_port == 8501  # a default
  assert server_flags.given(values) == {"model_base_path", "port", "versions", "enable_batching"}


def test_the_logged_configuration_names_every_flag_once():
  options = server_flags.read(_parsed("--model_name=m", "--versions=3"))
  text = server_flags.describe(options)
  assert "--model_name=m" in text and "--versions=['3']" in text
  assert re.findall(r"--(\w+)=", text) == list(server_flags.NAMES)
