"""Layering: read every source, merge them in precedence order, check, and build the ResolvedConfig.

One process (design.md "Precedence"): defaults < the checkpoint's generation_config.json < config.ini < TOML < env <
command line < admin. Router mode, per
model (docs/precedence.md rule 2.15): defaults < config.ini < TOML < env < presets ``[*]`` < the model's entry (store <
``--models-dir`` < preset section, then TOML ``[models.NAME]``) < the router's explicit command-line flags, less
the reserved ones (rule 2.10) < admin.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from mlxd.config.options import OptionTable, table
from mlxd.config.refusals import contradictions, refusals
from mlxd.config.resolved import ModelResolved, ResolvedConfig, build_config, config_hash
from mlxd.config.sources.admin import AdminSource
from mlxd.config.sources.argv import ArgvSource
from mlxd.config.sources.base import Layer
from mlxd.config.sources.checkpoint import CheckpointSource, checkpoint_dir
from mlxd.config.sources.configini import SYSTEM_DIR, ConfigIniSource, config_ini_paths
from mlxd.config.sources.defaults import DefaultsSource
from mlxd.config.sources.env import EnvSource
from mlxd.config.sources.presets import Presets, PresetsSource
from mlxd.config.sources.toml import TomlSource
from mlxd.config.values import Setting
from mlxd.errors import ConfigError, ConfigProblem

# Router command-line options that are not laid over every model (docs/precedence.md rule 2.10).
ROUTER_RESERVED = frozenset({"ssl-key-file", "ssl-cert-file", "api-key", "models-dir", "models-max",
                             "models-preset", "models-autoload", "model", "mmproj", "alias", "hf-repo"})

# mlxd's defaults that depend on another option: name -> (the option, the default while that option is set).
DEPENDENT_DEFAULTS: dict[str, tuple[str, Any]] = {"watch-config": ("config", True)}


@dataclass
class Sources:
    """Everything read from the outside world, kept so that overrides can be layered on later."""

    defaults: Layer
    config_ini: Layer
    toml: Layer
    env: Layer
    cli: Layer
    admin: Layer = field(default_factory=lambda: Layer("admin"))
    presets: Presets | None = None
    models_dir: dict[str, str] = field(default_factory=dict)
    store_models: dict[str, str] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)  # every file read, for reloading on change
    problems: list[ConfigProblem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    # The checkpoint layer of each checkpoint directory read so far (None: no checkpoint on this machine).
    checkpoints: dict[str | None, Layer] = field(default_factory=dict)

    def base_layers(self) -> list[Layer]:
        return [self.defaults, self.config_ini, self.toml, self.env]

    def with_checkpoint(self, layers: list[Layer], tbl: OptionTable) -> list[Layer]:
        """``layers`` (defaults first) with the layer of the checkpoint they name put just above the defaults."""
        merged = merge(layers, tbl)
        where = checkpoint_dir(merged["model"].value, merged["hf-repo"].value, merged["model-store-root"].value)
        key = str(where) if where is not None else None
        if key not in self.checkpoints:
            self.checkpoints[key] = CheckpointSource(where, tbl).read()
        return [layers[0], self.checkpoints[key], *layers[1:]]


def merge(layers: list[Layer], tbl: OptionTable) -> dict[str, Setting]:
    """Later layers win; accumulating options add env and command-line lists together (rule 1.4)."""
    out: dict[str, Setting] = {}
    accumulated: dict[str, bool] = {}
    for layer in layers:
        for name, setting in layer.settings.items():
            previous = out.get(name)
            if (tbl.get(name).accumulate and layer.accumulates and previous is not None and accumulated.get(name)
                    and isinstance(setting.value, list)):
                setting = Setting(list(previous.value) + list(setting.value), setting.source)
            out[name] = setting
            accumulated[name] = layer.accumulates
    return out


def _read_bytes(path: str, option: str, source: str, problems: list[ConfigProblem]) -> bytes | None:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        problems.append(ConfigProblem(option, source, f"cannot read the file: {exc.strerror or exc}", value=path))
        return None


def read_sources(argv: list[str], env: Mapping[str, str], *, system_config_dir: Path = SYSTEM_DIR,
                 read_config_ini: bool = True, store_models: Mapping[str, str] | None = None) -> Sources:
    """Read every source once: the command line, the environment and the files they name."""
    tbl = table()
    cli = ArgvSource(argv, tbl).read()
    env_layer = EnvSource(env, tbl).read()
    problems: list[ConfigProblem] = []
    toml_layer = Layer("toml")
    config = cli.settings.get("config") or env_layer.settings.get("config")
    if config is not None and config.value:
        data = _read_bytes(config.value, "config", config.source, problems)
        if data is not None:
            toml_layer = TomlSource(data, config.value, tbl).read()
            if not data.strip():
                # An editor's truncate-then-write reads as an empty file: refused, so the running one keeps serving.
                problems.append(ConfigProblem("config", config.source, "the file is empty (a truncated write reads "
                                              "like this); give it an option, or a comment to mean every option "
                                              "at its default", value=config.value))
    ini_files = []
    if read_config_ini:
        for path in config_ini_paths(env, system_config_dir):
            if path.is_file():
                data = _read_bytes(str(path), "config.ini", f"ini:{path}", problems)
                if data is not None:
                    ini_files.append((str(path), data.decode("utf-8", errors="replace")))
    files = [path for path, _ in ini_files] + ([config.value] if config is not None and config.value else [])
    sources = Sources(DefaultsSource(tbl).read(), ConfigIniSource(ini_files, tbl).read(), toml_layer, env_layer,
                      cli, store_models=dict(store_models or {}), files=files, problems=problems)
    base = merge(sources.base_layers() + [cli], tbl)
    preset = base["models-preset"]
    if preset.value:
        data = _read_bytes(preset.value, "models-preset", preset.source, problems)
        if data is not None:
            sources.presets = PresetsSource(data.decode("utf-8", errors="replace"), preset.value, tbl).read()
            sources.files.append(preset.value)
    models_dir = base["models-dir"]
    if models_dir.value:
        sources.models_dir = _scan_models_dir(models_dir, problems, sources.warnings)
    return sources


def _scan_models_dir(setting: Setting, problems: list[ConfigProblem], warnings: list[str]) -> dict[str, str]:
    """Each subdirectory of --models-dir holding a config.json is a model named after it (an MLX checkpoint
    directory). A symlink that leads outside the directory is skipped: the directory is what the operator vouched
    for."""
    root = Path(setting.value)
    if not root.is_dir():
        problems.append(ConfigProblem("models-dir", setting.source, "not a directory", value=setting.value))
        return {}
    real_root = root.resolve()
    found = {}
    for child in sorted(root.iterdir()):
        if child.name.startswith("."):
            continue
        if child.is_symlink() and not child.resolve().is_relative_to(real_root):
            warnings.append(f"{setting.source}: skipped {child.name}: a symlink that leads outside {root}")
        elif child.is_dir() and (child / "config.json").is_file():
            found[child.name] = str(child)
        elif child.is_dir():
            warnings.append(f"{setting.source}: skipped {child.name}: no config.json (not an MLX checkpoint)")
        elif child.suffix.lower() == ".gguf":
            warnings.append(f"{setting.source}: skipped {child.name}: GGUF files cannot be loaded by MLX")
    return found


def layer(sources: Sources) -> ResolvedConfig:
    """Merge, check and build; raises ConfigError listing every problem."""
    tbl = table()
    layers = sources.with_checkpoint(sources.base_layers() + [sources.cli, sources.admin], tbl)
    problems = list(sources.problems)
    warnings = list(sources.warnings)
    for lay in layers:
        problems.extend(lay.problems)
        warnings.extend(lay.warnings)
    base = _derive(merge(layers, tbl))
    problems.extend(contradictions(base))
    problems.extend(refusals(base, tbl))
    is_router = not any(base[name].value for name in ("model", "hf-repo", "docker-repo"))
    if base["model"].value and base["hf-repo"].value:
        warnings.append(f"{base['model'].source}: model is not used: --hf-repo ({base['hf-repo'].source}) "
                        "wins over -m, as in b10621")
    models: dict[str, ModelResolved] = {}
    if sources.presets is not None:
        problems.extend(sources.presets.problems)
    if is_router:
        models = _router_models(sources, tbl, problems)
    elif sources.toml.models:
        warnings.append("toml: [models.NAME] tables apply in router mode only; a model is given, so they are unused")
    problems = _unique(problems)
    if problems:
        raise ConfigError(problems)
    try:
        config = build_config(base)
    except ValidationError as exc:  # the sources type every value; this guards the table against drift
        raise ConfigError([ConfigProblem(None, None, f"internal type mismatch: {exc}")]) from exc
    return ResolvedConfig(config=config, provenance={n: s.source for n, s in base.items()},
                          config_hash=config_hash(config), is_router=is_router, models=models,
                          warnings=tuple(warnings), sources=sources)


def _derive(settings: dict[str, Setting]) -> dict[str, Setting]:
    """Values that follow from other options. b10621's: with --tools and no explicit --cors-origins, CORS origins
    become ``localhost`` (docs/precedence.md rule 1.12), provenance ``derived:`` and the source of the option that
    caused it. mlxd's own defaults that depend on another option keep ``default:`` and that option's name: with a
    TOML file (``--config``) and no explicit --watch-config, the file is watched (``default:--config``, rule 3.2)."""
    tools = settings["tools"]
    if tools.value and settings["cors-origins"].source == "default":
        settings["cors-origins"] = Setting("localhost", f"derived:{tools.source}")
    for name, (cause, value) in DEPENDENT_DEFAULTS.items():
        if settings[cause].value and settings[name].source == "default":
            settings[name] = Setting(value, f"default:--{cause}")
    return settings


def _router_models(sources: Sources, tbl: OptionTable, problems: list[ConfigProblem]) -> dict[str, ModelResolved]:
    entries: dict[str, tuple[str, dict[str, Setting]]] = {}
    for name, path in sources.store_models.items():
        entries[name] = ("store", {"model": Setting(path, "store")})
    for name, path in sources.models_dir.items():  # replaces a store entry outright (rule 2.9)
        entries[name] = ("models-dir", {"model": Setting(path, f"models-dir:{path}")})
    overlays: list[tuple[str, dict[str, dict[str, Setting]]]] = []
    if sources.presets is not None:
        overlays.append(("preset", sources.presets.models))
    toml_models = {n: m for n, m in sources.toml.models.items() if n != "*"}
    overlays.append(("toml", toml_models))
    for kind, models in overlays:  # merges key by key over what is there (rule 2.9)
        for name, settings in models.items():
            _, current = entries.get(name, (kind, {}))
            entries[name] = (kind, {**current, **settings})
    # [*] of the presets file, then TOML's [models."*"] over it.
    global_layer = Layer("preset", {**(sources.presets.global_settings if sources.presets else {}),
                                    **sources.toml.models.get("*", {})})
    cli_overlay = Layer("cli", {n: s for n, s in sources.cli.settings.items() if n not in ROUTER_RESERVED})
    out = {}
    for name, (kind, settings) in sorted(entries.items()):
        merged = _derive(merge(sources.with_checkpoint(sources.base_layers() + [
            global_layer, Layer("entry", settings), cli_overlay, sources.admin], tbl), tbl))
        model_problems = refusals(merged, tbl) + contradictions(merged, model_argument=False)
        for p in model_problems:
            problems.append(replace(p, message=f"model '{name}': {p.message}"))
        if model_problems:
            continue
        try:
            config = build_config(merged)
        except ValidationError as exc:
            problems.append(ConfigProblem(None, kind, f"model '{name}': internal type mismatch: {exc}"))
            continue
        extras = {**(sources.presets.extras.get(name, {}) if sources.presets else {}),
                  **sources.toml.model_extras.get(name, {})}
        out[name] = ModelResolved(name, kind, config, {n: s.source for n, s in merged.items()}, extras)
    return out


def _unique(problems: list[ConfigProblem]) -> list[ConfigProblem]:
    seen: set[str] = set()
    out = []
    for p in problems:
        key = p.render()
        if key not in seen:
            seen.add(key)
            out.append(p)
    return out


def resolve(argv: list[str], env: Mapping[str, str] | None = None, *, system_config_dir: Path = SYSTEM_DIR,
            read_config_ini: bool = True, store_models: Mapping[str, str] | None = None) -> ResolvedConfig:
    """Resolve a llama-server command line and an environment snapshot into one ResolvedConfig.

    ``env`` defaults to ``os.environ``; ``store_models`` (name -> checkpoint directory) is the model store's
    listing for router mode. Raises ConfigError with every problem found.
    """
    sources = read_sources(argv, os.environ if env is None else env, system_config_dir=system_config_dir,
                           read_config_ini=read_config_ini, store_models=store_models)
    return layer(sources)


def apply_overrides(resolved: ResolvedConfig, overrides: Mapping[str, Any], source: str = "admin") -> ResolvedConfig:
    """A new ResolvedConfig with ``{name: value}`` laid over everything (keys in any spelling without dashes;
    values as in TOML). ``UNSET`` as a value removes an earlier override. Raises ConfigError; ``resolved`` is
    unchanged either way."""
    if resolved.sources is None:
        raise ConfigError([ConfigProblem(None, source, "this configuration was not built from sources")])
    admin = AdminSource(overrides, table(), current=resolved.sources.admin, source=source).read()
    if admin.problems:
        raise ConfigError(admin.problems)
    return layer(replace(resolved.sources, admin=admin))
