"""serving.server.model_config: text ModelServerConfig files as TF Serving reads them
(server_core.cc's checks and messages), and ServerCore's label rules on them."""

import pytest

from serving.server import model_config
from serving.server.model_config import ConfigError, ModelConfig

TWO_MODELS = """
model_config_list {
  config {
    name: "tfattn"
    base_path: "/models/tfattn"
    model_platform: "tensorflow"
    model_version_policy { specific { versions: 2 versions: 1 } }
    version_labels { key: "stable" value: 1 }
    version_labels { key: "canary" value: 2 }
  }
  config {
    name: "other"
    base_path: "/models/other"
    model_platform: "tensorflow"
    model_version_policy { latest { num_versions: 2 } }
  }
  config { name: "all" base_path: "/models/all" model_type: TENSORFLOW
           model_version_policy { all {} } }
}
"""


def test_a_config_file_becomes_model_configs(tmp_path):
  path = tmp_path / "models.config"
  path.write_text(TWO_MODELS)
  assert model_config.read_file(str(path)) == [
    ModelConfig("tfattn", "/models/tfattn", "specific", (1, 2), 1, {"stable": 1, "canary": 2}),
    ModelConfig("other", "/models/other", "latest", (), 2, {}),
    ModelConfig("all", "/models/all", "all", (), 1, {}),
  ]


def test_an_empty_config_is_no_models():
  assert model_config.from_proto(model_config.parse_text("")) == []


@pytest.mark.parametrize(
  "text,message",
  [
    (
      'model_config_list { config { name: "a" base_path: "/a" model_platform: "tensorflow" } '
      'config { name: "a" base_path: "/b" model_platform: "tensorflow" } }',
      "Illegal to list model a multiple times in config list",
    ),
    (
      'model_config_list { config { name: "a" base_path: "models/a" '
      'model_platform: "tensorflow" } }',
      "Expected model a to have an absolute path or URI; got base_path()=models/a",
    ),
    (
      'model_config_list { config { name: "a" base_path: "/a" } }',
      "Illegal setting neither ModelServerConfig::model_type (deprecated) nor "
      "ModelServerConfig::model_platform, model name is a",
    ),
    (
      'model_config_list { config { name: "a" base_path: "/a" model_platform: "tensorflow" '
      "model_type: TENSORFLOW } }",
      "Illegal setting both ModelServerConfig::model_type",
    ),
    (
      'model_config_list { config { name: "a" base_path: "/a" model_platform: "pytorch" } }',
      "Model a requests unsupported platform pytorch",
    ),
    (
      'model_config_list { config { name: "a" base_path: "/a" model_platform: "tensorflow" '
      "model_version_policy { specific { } } } }",
      "the specific version policy lists no versions",
    ),
    (
      'model_config_list { config { base_path: "/a" model_platform: "tensorflow" } }',
      "has no name",
    ),
    ("custom_model_config { }", "Only ModelConfigList is currently supported"),
    (
      'model_config_list { config { name: "a" base_path: "/a" model_platfrom: "tensorflow" } }',
      'has no field named "model_platfrom"',
    ),
    ('model_config_list { config { name: "a" ', "not a text ModelServerConfig"),
  ],
  ids=[
    "duplicate",
    "relative path",
    "no platform",
    "two platforms",
    "other platform",
    "specific without versions",
    "no name",
    "custom config",
    "typo",
    "truncated",
  ],
)
def test_configs_tf_serving_refuses_are_refused_with_its_message(text, message):
  with pytest.raises(ConfigError) as error:
    model_config.from_proto(model_config.parse_text(text))
  assert message in str(error.value)


def test_an_unreadable_file_names_itself(tmp_path):
  with pytest.raises(ConfigError, match=r"cannot read .*missing\.config"):
    model_config.read_file(str(tmp_path / "missing.config"))


def test_the_single_model_of_the_flags():
  assert model_config.single_model("m", "/base", "specific", [3, 1], {"s": 1}) == [
    ModelConfig("m", "/base", "specific", (1, 3), 1, {"s": 1})
  ]
