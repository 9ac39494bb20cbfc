"""Configuration: sources (defaults, config.ini, TOML, env, argv, presets, admin) layered into one frozen Config
with provenance.

Public surface: :func:`resolve`, :class:`ResolvedConfig` (``.config``, ``.provenance``, ``.config_hash``,
``.is_router``, ``.models``, ``.explicit(name)``), :func:`apply_overrides`, :func:`diff` / :class:`ChangePlan`,
:class:`Config`, the option table (:func:`table`, :class:`OptionSpec`), :data:`UNSET`, and :func:`is_default` (whether a
provenance names no source that set the option).
"""

from mlxd.config.diff import Change, ChangePlan, diff
from mlxd.config.layering import apply_overrides, resolve
from mlxd.config.model import Config
from mlxd.config.options import Kind, OptionSpec, OptionTable, ValueType, field_name, table
from mlxd.config.resolved import ModelResolved, ResolvedConfig, config_hash
from mlxd.config.values import UNSET, Setting, is_default
from mlxd.errors import ConfigError, ConfigProblem

__all__ = [
    "UNSET", "Change", "ChangePlan", "Config", "ConfigError", "ConfigProblem", "Kind", "ModelResolved",
    "OptionSpec", "OptionTable", "ResolvedConfig", "Setting", "ValueType", "apply_overrides", "config_hash", "diff",
    "field_name", "is_default", "resolve", "table",
]
