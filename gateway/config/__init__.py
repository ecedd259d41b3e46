"""Configuration: `config.yaml` loaded, `${ENV}` substituted, defaults filled, validated, typed.

This face is what the rest of chinwag imports. Each key is declared once, in its section's dataclass
(`gateway.config.sections`); `Config` (`gateway.config.views`) holds one field per section, the
schema the validator checks against is derived from them (`gateway.config.schema`), and
`gateway.config.load` reads the file and builds the sections."""

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
