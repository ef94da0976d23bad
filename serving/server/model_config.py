"""Which models the server serves: TF Serving's `--model_config_file` (a text-format
`ModelServerConfig`, parsed by protobuf's text_format into tensorflow-serving-api's own message),
the same message sent over gRPC (`ModelService.HandleReloadConfigRequest`), or the one model of
`--model_name`/`--model_base_path`. Each becomes a list of `ModelConfig`, checked the way
ServerCore checks a config (server_core.cc), with its messages.

Imports no TensorFlow: the server reads its config before TensorFlow starts.
"""

import dataclasses
import os
from typing import Dict, List, Tuple

from google.protobuf import text_format
from tensorflow_serving.config import model_server_config_pb2

TENSORFLOW_PLATFORM = "tensorflow"
POLICIES = ("latest", "all", "specific")


class ConfigError(ValueError):
  """A config TF Serving would refuse; the message says which model and what to change."""


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """One served model: where its versions are, which of them to serve, its version labels."""

  name: str
  base_path: str
  policy: str = "latest"  # latest (the newest num_versions), all, or specific (versions)
  versions: Tuple[int, ...] = ()
  num_versions: int = 1
  labels: Dict[str, int] = dataclasses.field(default_factory=dict)

  def __post_init__(self):
    if not self.name:
      raise ConfigError('a model config has no name: every model needs name: "..."')
    if self.policy not in POLICIES:
      raise ConfigError(
        f"model {self.name}: version policy must be one of {POLICIES}, got {self.policy!r}"
      )
    if self.policy == "specific" and not self.versions:
      raise ConfigError(
        f"model {self.name}: the specific version policy lists no versions "
        "(model_version_policy { specific { versions: 1 } })"
      )
    if self.num_versions < 1:
      raise ConfigError(f"model {self.name}: latest num_versions must be at least 1")


def parse_text(text: str) -> model_server_config_pb2.ModelServerConfig:
  """Text-format ModelServerConfig -> the message; ConfigError naming the line on a typo."""
  try:
    return text_format.Parse(text, model_server_config_pb2.ModelServerConfig())
  except text_format.ParseError as error:
    raise ConfigError(f"not a text ModelServerConfig: {error}") from None


def read_file(path: str) -> List[ModelConfig]:
  """The models of a --model_config_file."""
  try:
    with open(path, encoding="utf-8") as f:
      text = f.read()
  except (OSError, UnicodeDecodeError) as error:
    raise ConfigError(f"cannot read {path}: {getattr(error, 'strerror', None) or error}") from None
  return from_proto(parse_text(text))


def from_proto(config: model_server_config_pb2.ModelServerConfig) -> List[ModelConfig]:
  """A ModelServerConfig message -> its models, checked as ServerCore::ReloadConfig checks
  them. An empty config is no models (TF Serving takes no action on one)."""
  kind = config.WhichOneof("config")
  if kind is None:
    return []
  if kind != "model_config_list":
    raise ConfigError(
      "ServerModelConfig type not supported by HandleReloadConfigRequest. "
      "Only ModelConfigList is currently supported"
    )
  models, names = [], set()
  for proto in config.model_config_list.config:
    if proto.name in names:  # ValidateModelConfigList
      raise ConfigError(f"Illegal to list model {proto.name} multiple times in config list")
    names.add(proto.name)
    models.append(_model_config(proto))
  return models


def _platform(proto) -> str:
  """GetPlatform: model_platform (or the deprecated model_type TENSORFLOW)."""
  if proto.model_type != model_server_config_pb2.MODEL_TYPE_UNSPECIFIED:
    if proto.model_platform:
      raise ConfigError(
        "Illegal setting both ModelServerConfig::model_type (deprecated) and "
        f"ModelServerConfig::model_platform, model name is {proto.name}"
      )
    if proto.model_type != model_server_config_pb2.TENSORFLOW:
      raise ConfigError(f"ModelServerConfig::model_type choice {proto.model_type} not supported.")
    return TENSORFLOW_PLATFORM
  if not proto.model_platform:
    raise ConfigError(
      "Illegal setting neither ModelServerConfig::model_type (deprecated) nor "
      f"ModelServerConfig::model_platform, model name is {proto.name}"
    )
  return proto.model_platform


def _model_config(proto) -> ModelConfig:
  platform = _platform(proto)
  if platform != TENSORFLOW_PLATFORM:  # CreateStoragePathRoutes
    raise ConfigError(f"Model {proto.name} requests unsupported platform {platform}")
  if not os.path.isabs(proto.base_path):  # ValidateModelConfigList
    raise ConfigError(
      f"Expected model {proto.name} to have an absolute path or URI; got "
      f"base_path()={proto.base_path}"
    )
  policy = proto.model_version_policy
  choice = policy.WhichOneof("policy_choice") or "latest"
  return ModelConfig(
    name=proto.name,
    base_path=proto.base_path,
    policy=choice,
    versions=tuple(sorted(policy.specific.versions)),
    # proto3 cannot tell 0 from unset: 0 is the default, one version.
    num_versions=policy.latest.num_versions or 1,
    labels=dict(proto.version_labels),
  )


def single_model(
  name: str, base_path: str, policy: str = "latest", versions=(), labels=None
) -> List[ModelConfig]:
  """The one model of --model_name/--model_base_path (BuildSingleModelConfig)."""
  return [
    ModelConfig(
      name=name,
      base_path=base_path,
      policy=policy,
      versions=tuple(sorted(versions)),
      labels=dict(labels or {}),
    )
  ]
