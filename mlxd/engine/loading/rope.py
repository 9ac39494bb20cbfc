"""llama-server's RoPE options as overrides of a checkpoint's config.json, which mlx-lm builds the model from.

``--rope-freq-base`` becomes ``rope_theta``; ``--rope-scaling``, ``--rope-scale`` / ``--rope-freq-scale`` and the
``--yarn-*`` options become a ``rope_scaling`` entry that mlx-lm's ``initialize_rope`` reads (``linear`` divides
positions by the factor, ``yarn`` is YaRN over ``original_max_position_embeddings``). Options left unset keep the
checkpoint's own values, as llama.cpp keeps the GGUF's. What mlx-lm cannot do is refused before any weight is read.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlxd.config import Config
from mlxd.errors import EngineError

# llama.cpp's YaRN defaults when neither the option nor the checkpoint gives one.
_BETA_FAST = 32.0
_BETA_SLOW = 1.0


@dataclass(frozen=True)
class RopeOptions:
    """The RoPE options of a Config, in llama-server's units (unset: None, 0 or -1, as upstream)."""

    rope_scaling: str | None = None  # none, linear, yarn
    rope_scale: float | None = None  # context scaling factor N
    rope_freq_base: float | None = None
    rope_freq_scale: float | None = None  # 1/N
    yarn_orig_ctx: int = 0
    yarn_beta_slow: float = -1.0
    yarn_beta_fast: float = -1.0
    yarn_ext_factor: float = -1.0  # mlx-lm's YaRN is fixed at 1.0 (and -1 means the model's own)
    yarn_attn_factor: float = -1.0  # likewise

    @classmethod
    def of(cls, cfg: Config) -> RopeOptions:
        """The RoPE options of a Config."""
        return cls(rope_scaling=cfg.rope_scaling, rope_scale=cfg.rope_scale, rope_freq_base=cfg.rope_freq_base,
                   rope_freq_scale=cfg.rope_freq_scale, yarn_orig_ctx=cfg.yarn_orig_ctx,
                   yarn_beta_slow=cfg.yarn_beta_slow, yarn_beta_fast=cfg.yarn_beta_fast,
                   yarn_ext_factor=cfg.yarn_ext_factor, yarn_attn_factor=cfg.yarn_attn_factor)

    @property
    def factor(self) -> float | None:
        """The context scaling factor asked for: --rope-scale N, else 1 / --rope-freq-scale."""
        if self.rope_scale:
            return float(self.rope_scale)
        if self.rope_freq_scale:
            return 1.0 / float(self.rope_freq_scale)
        return None

    @property
    def yarn_given(self) -> bool:
        return self.yarn_orig_ctx > 0 or self.yarn_beta_slow >= 0 or self.yarn_beta_fast >= 0

    @property
    def any(self) -> bool:
        return bool(self.rope_freq_base) or self.rope_scaling is not None or self.factor is not None or self.yarn_given


def model_overrides(path: Path, options: RopeOptions) -> dict[str, Any]:
    """The config.json keys to override for ``options`` (empty when none is set); EngineError when mlx-lm cannot
    apply them to the checkpoint at ``path``."""
    for option, value in (("--yarn-ext-factor", options.yarn_ext_factor),
                          ("--yarn-attn-factor", options.yarn_attn_factor)):
        if value not in (-1.0, 1.0):  # the configuration refuses these first; a caller may skip it
            raise _refusal(path, f"{option} {value}: mlx-lm's YaRN has this factor fixed at 1.0")
    if not options.any:
        return {}
    config = _read_config(path)
    if isinstance(config.get("text_config"), dict):
        raise _refusal(path, "its text model's configuration is nested (text_config), which the RoPE options do "
                             "not reach")
    fields = _model_fields(path, config)
    out: dict[str, Any] = {}
    if options.rope_freq_base:
        _require(path, fields, "rope_theta", "--rope-freq-base")
        out["rope_theta"] = float(options.rope_freq_base)
    scaling = _scaling(path, config, options)
    if scaling is not None:
        _require(path, fields, "rope_scaling", "--rope-scaling/--rope-scale/--rope-freq-scale")
        out["rope_scaling"] = scaling
    return out


def _scaling(path: Path, config: dict[str, Any], options: RopeOptions) -> dict[str, Any] | None:
    if options.rope_scaling is None and options.factor is None and not options.yarn_given:
        return None
    own = config.get("rope_scaling") or config.get("rope_parameters")
    own = own if isinstance(own, dict) else {}
    own_type = str(own.get("type") or own.get("rope_type") or "default")
    kind = options.rope_scaling
    if kind is None:  # llama.cpp keeps the model's own scaling type; a model without one scales linearly
        if own_type in ("linear", "yarn"):
            kind = own_type
        elif own_type == "default":
            kind = "yarn" if options.yarn_given else "linear"
        else:
            raise _refusal(path, f"its own RoPE scaling is {own_type!r}, which a new factor cannot be given to; "
                                 "name the scaling with --rope-scaling linear or --rope-scaling yarn")
    if kind == "none":
        if options.factor is not None or options.yarn_given:
            raise _refusal(path, "--rope-scaling none turns scaling off, so a scaling factor or YaRN option has "
                                 "nothing to act on; drop one of them")
        return {"type": "linear", "factor": 1.0}  # no scaling, in a shape every mlx-lm model accepts
    if kind == "linear" and options.yarn_given:
        raise _refusal(path, "the --yarn-* options apply only to --rope-scaling yarn")
    # What an option leaves unset comes from the checkpoint's own scaling when it is of the same type.
    inherited = own if own_type == kind else {}
    factor = options.factor if options.factor is not None else float(inherited.get("factor", 1.0))
    if kind == "linear":
        return {"type": "linear", "factor": factor}
    yarn: dict[str, Any] = {k: inherited[k] for k in ("mscale", "mscale_all_dim") if k in inherited}
    original = (options.yarn_orig_ctx or inherited.get("original_max_position_embeddings")
                or config.get("max_position_embeddings"))
    if not original:
        raise _refusal(path, "YaRN needs the original context length; give --yarn-orig-ctx")
    yarn.update(type="yarn", factor=factor, original_max_position_embeddings=int(original),
                beta_fast=_given_or(options.yarn_beta_fast, inherited.get("beta_fast", _BETA_FAST)),
                beta_slow=_given_or(options.yarn_beta_slow, inherited.get("beta_slow", _BETA_SLOW)))
    return yarn


def _given_or(given: float, fallback: Any) -> float:
    """A --yarn-beta-* value, or ``fallback`` when it is left at -1."""
    return float(given) if given >= 0 else float(fallback)


def _read_config(path: Path) -> dict[str, Any]:
    try:
        config = json.loads((Path(path) / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise EngineError(f"model {path}: cannot read config.json: {exc}") from exc
    if not isinstance(config, dict):
        raise EngineError(f"model {path}: config.json is not an object")
    return config


def _model_fields(path: Path, config: dict[str, Any]) -> set[str]:
    """The configuration fields mlx-lm's model class for this checkpoint reads."""
    from mlx_lm.utils import _get_classes

    try:
        _, args_class = _get_classes(config)
    except (KeyError, ValueError) as exc:
        raise EngineError(f"model {path}: cannot load: {exc}") from exc
    return {f.name for f in dataclasses.fields(args_class)} if dataclasses.is_dataclass(args_class) else set()


def _require(path: Path, fields: set[str], key: str, option: str) -> None:
    if key not in fields:
        raise _refusal(path, f"mlx-lm's model for it has no {key!r} setting, so {option} cannot reach it")


def _refusal(path: Path, why: str) -> EngineError:
    return EngineError(f"RoPE options not supported for model {path}: {why}")
