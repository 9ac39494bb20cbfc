"""Refusals: options mlxd parses but cannot honour, and options that contradict each other.

Driven by the option table: a ``refuse`` row is refused for any value but its default, an ``inert=`` row for any
value outside its inert set, a ``removed`` row always, and a ``check=`` row by the rule of that name below. Defaults
are never refused. Every refusal names the value, why, and what to use instead, before any model loads.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from mlxd.config.options import OptionSpec, OptionTable
from mlxd.config.values import Setting
from mlxd.config.webui import json_object_file, json_object_text
from mlxd.errors import ConfigProblem

def _shown(spec: OptionSpec, value: Any) -> str:
    if spec.secret:
        return "<redacted>"
    if isinstance(value, list):
        return ",".join(value)
    return str(value).lower() if isinstance(value, bool) else str(value)


def _refusal(spec: OptionSpec, setting: Setting, reason: tuple[str, str] | None = None) -> ConfigProblem:
    why, instead = reason or spec.reason or ("mlxd cannot honour it", "leave it unset")
    return ConfigProblem(spec.name, setting.source, f"not supported by mlxd: {why}; {instead}",
                         value=_shown(spec, setting.value))


def _model_rule(spec: OptionSpec, value: Any) -> bool:
    return isinstance(value, str) and value.lower().endswith((".gguf", ".ggml"))


def _hf_repo_rule(spec: OptionSpec, value: Any) -> bool:
    return isinstance(value, str) and ":" in value


def _ngl_rule(spec: OptionSpec, value: Any) -> bool:
    # Whether a count is full offload depends on the checkpoint's layer count, and 0 is CPU-only, which depends on
    # MLX's device: mlxd.engine.loading.placement decides both when the model is about to load, before any weight is read.
    return False


def _device_rule(spec: OptionSpec, value: Any) -> bool:
    # "none" is CPU-only (mlxd.engine.loading.placement checks MLX's device); device names are ggml backend names.
    return value is not None and str(value).strip().lower() != "none"


def _rpc_rule(spec: OptionSpec, value: Any) -> bool:
    if value is None or value == "":
        return False
    for entry in str(value).split(","):
        host, _, port = entry.strip().rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            return True
    return False


def _tensor_split_rule(spec: OptionSpec, value: Any) -> bool:
    if value is None or value == "":
        return False
    try:
        shares = [float(v) for v in str(value).replace("/", ",").split(",")]
    except ValueError:
        return True
    return any(v < 0 for v in shares) or not any(v > 0 for v in shares)


# A check=NAME rule: True when the value must be refused.
RULES: dict[str, Callable[[OptionSpec, Any], bool]] = {
    "model": _model_rule,
    # A model across machines (mlxd.engine.distributed): HOST:PORT of `mlxd rpc-server`s; row and layer splits.
    "rpc": _rpc_rule,
    "split-mode": lambda spec, value: value == "tensor",
    "tensor-split": _tensor_split_rule,
    "hf-repo": _hf_repo_rule,
    "ngl": _ngl_rule,
    "device": _device_rule,
    "rope": lambda spec, value: False,  # a cross-option rule, see contradictions()
    # -1 is "the model's own", which mlx-lm's YaRN fixes at 1.0.
    "yarn-ext-factor": lambda spec, value: value not in (-1.0, 1.0),
    "yarn-attn-factor": lambda spec, value: value not in (-1.0, 1.0),
    # b10621's cache types that MLX can store (engine.loading.kv_types); iq4_nl's codebook has no MLX counterpart.
    "kv-type": lambda spec, value: value == "iq4_nl",
    # The chat page's static directory and default settings (mlxd.web), checked before they are served.
    "path": lambda spec, value: bool(value) and not Path(value).is_dir(),
    "webui-config": lambda spec, value: value is not None and json_object_text(value) is None,
    "webui-config-file": lambda spec, value: value is not None and json_object_file(value) is None,
    # The speculative types mlxd serves (engine.speculative).
    "spec-type": lambda spec, value: any(v not in ("none", "draft-simple", "ngram-simple", "ngram-map-k",
                                                   "ngram-map-k4v", "ngram-mod", "ngram-cache") for v in value),
}


def _is_refused(spec: OptionSpec, value: Any) -> bool:
    if spec.treatment == "removed":
        return True
    if spec.check:
        return RULES[spec.check](spec, value)
    if spec.inert_values is not None:  # the inert set, not the default, decides (--ui asks for what mlxd lacks)
        items = value if isinstance(value, list) else [value]
        return any(_word(item) not in spec.inert_values for item in items)
    return spec.treatment == "refuse" and value != spec.default


def _word(item: Any) -> str:
    return ("true" if item else "false") if isinstance(item, bool) else str(item)


def refusals(settings: Mapping[str, Setting], table: OptionTable) -> list[ConfigProblem]:
    """One problem per explicitly set option whose value mlxd refuses."""
    problems = []
    for name, setting in settings.items():
        spec = table.get(name)
        if setting.source != "default" and _is_refused(spec, setting.value):
            problems.append(_refusal(spec, setting))
    return problems


def _explicit(settings: Mapping[str, Setting], name: str) -> Setting | None:
    setting = settings.get(name)
    # An empty string is b10621's own "not given" for a path (its std::string options test .empty()).
    return setting if setting is not None and setting.source != "default" and setting.value not in (None, "") \
        else None


def contradictions(settings: Mapping[str, Setting], *, model_argument: bool = True) -> list[ConfigProblem]:
    """Options that contradict each other: one problem per pair, naming both sources."""
    problems = []
    model = _explicit(settings, "model") if model_argument else None
    hf_repo = _explicit(settings, "hf-repo") if model_argument else None
    models_dir = _explicit(settings, "models-dir")
    preset = _explicit(settings, "models-preset")
    if models_dir and model:
        problems.append(ConfigProblem("models-dir", models_dir.source,
                                      f"cannot be combined with a model ({model.source}): --models-dir starts "
                                      "router mode; drop -m or drop --models-dir", value=models_dir.value))
    if preset and (model or hf_repo):
        other = model or hf_repo
        assert other is not None
        problems.append(ConfigProblem("models-preset", preset.source,
                                      f"cannot be combined with a model argument ({other.source}): presets "
                                      "configure router mode; drop the model argument or the presets file",
                                      value=preset.value))
    problems.extend(_not_distributed(settings))
    scale = _explicit(settings, "rope-scale")
    freq_scale = _explicit(settings, "rope-freq-scale")
    if scale and freq_scale and (scale.value == 0 or abs(freq_scale.value - 1.0 / scale.value) > 1e-6):
        problems.append(ConfigProblem("rope-scale", scale.source,
                                      f"contradicts rope-freq-scale={freq_scale.value} ({freq_scale.source}): "
                                      "--rope-scale N means --rope-freq-scale 1/N; give only one of them",
                                      value=str(scale.value)))
    return problems


# What does not yet run on a model split across machines (--rpc): refused, never ignored (docs/compat.md: deferred).
NOT_DISTRIBUTED = ("lora", "lora-scaled", "model-draft", "hf-repo-draft", "spec-type", "cache-type-k", "cache-type-v",
                   "embeddings", "reranking", "cache-disk")


def _not_distributed(settings: Mapping[str, Setting]) -> list[ConfigProblem]:
    rpc = _explicit(settings, "rpc")
    split = settings.get("split-mode")
    shares = _explicit(settings, "tensor-split")
    if shares is not None and (rpc is None or (split is not None and split.value in ("none", "row"))):
        why = "the model runs on this machine alone without --rpc" if rpc is None else \
            f"--split-mode {split.value if split else ''} does not read it (row: mlx-lm's shard splits evenly)"
        return [ConfigProblem("tensor-split", shares.source, f"not supported by mlxd here: {why}; it sizes each "
                              "machine's layer range with --rpc and --split-mode layer", value=str(shares.value))]
    if rpc is None or (split is not None and split.value == "none"):
        return []
    problems = []
    for name in NOT_DISTRIBUTED:
        setting = _explicit(settings, name)
        if setting is None or setting.value in ([], False, "f16", ["none"]):
            continue
        problems.append(ConfigProblem(name, setting.source, f"is not yet served by a model split across machines "
                                      f"(--rpc, {rpc.source}); drop it, or serve the model on one machine without "
                                      "--rpc", value=_shown_value(setting.value)))
    return problems


def _shown_value(value: Any) -> str:
    return ",".join(map(str, value)) if isinstance(value, list) else str(value)
