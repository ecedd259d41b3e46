"""Configuration: `config.yaml` loaded, `${ENV}` substituted, defaults filled, validated, typed.

This face is what the rest of chinwag imports; the schema (every key, its default and its check) is
in `gateway.config.schema`, the typed sections in `gateway.config.views`."""

from gateway.config.load import default_home, find_config_file, load_config, parse_config
from gateway.config.schema import ConfigError
from gateway.config.views import Config, ModelConfig, PlatformSettings

__all__ = [
    "Config",
    "ConfigError",
    "ModelConfig",
    "PlatformSettings",
    "default_home",
    "find_config_file",
    "load_config",
    "parse_config",
]
