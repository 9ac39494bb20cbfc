"""Pure helpers of the reconcile path: what a configuration's model is called, its LoRA adapters, and a served
model refreshed with new settings. They build new values; only the controller puts them into service."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    from mlxd.engine import ServedModel
    from mlxd.config import Config, ResolvedConfig


def model_label(cfg: "Config") -> str | None:
    """The name a configuration's model will be served under (first alias, else -m, else --hf-repo)."""
    aliases = sorted(set(cfg.alias or []))  # b10621 keeps them in a std::set: the smallest names the model
    return aliases[0] if aliases else (cfg.model or cfg.hf_repo)


def adapter_set(cfg: "Config") -> list[tuple[str, float]]:
    """The adapters a configuration loads, in id order, with their server-wide scales."""
    from mlxd.engine import adapter_specs

    return [(s.path, s.scale) for s in adapter_specs(cfg.lora, cfg.lora_scaled, cfg.lora_init_without_apply)]


def live_scales(before: "Config", after: "Config") -> dict[int, float] | None:
    """The scales (id -> scale) to set live when ``after`` keeps ``before``'s adapters; None for another set."""
    old, new = adapter_set(before), adapter_set(after)
    if [p for p, _ in old] != [p for p, _ in new]:
        return None
    return {i: scale for i, (_, scale) in enumerate(new)}


def lora_overrides(cfg: "Config", scales: Mapping[int, float]) -> dict[str, Any]:
    """The admin-layer options that give the same adapters the server-wide ``scales`` (id -> scale): every adapter
    moves to ``lora-scaled`` (FNAME:SCALE, in id order, so ids stay), ``lora`` and ``lora-init-without-apply``
    are cleared where they were set."""
    values: dict[str, Any] = {"lora-scaled": [(path, float(scales.get(i, 0.0)))
                                              for i, (path, _) in enumerate(adapter_set(cfg))]}
    if cfg.lora:
        values["lora"] = []
    if cfg.lora_init_without_apply:
        values["lora-init-without-apply"] = False
    return values


def refresh(current: "ServedModel", desired: "ResolvedConfig", template_changed: bool) -> "ServedModel":
    """The same worker with new sampling defaults (and template): no reload, no drain."""
    from mlxd.daemon.loading import load_template
    from mlxd.engine import sampling_defaults
    from mlxd.engine import TemplateSpec

    cfg = desired.config
    explicit = {name for name in desired.provenance if desired.explicit(name)}
    sampling = sampling_defaults(cfg, explicit)
    template = load_template(current.loaded, TemplateSpec.of(cfg)) if template_changed else current.chat_template
    aliases = sorted(set(cfg.alias))  # b10621 keeps them in a std::set: the smallest names the model
    name = aliases[0] if aliases else current.name
    return dataclasses.replace(current, sampling_defaults=sampling, chat_template=template, aliases=aliases,
                               name=name)
