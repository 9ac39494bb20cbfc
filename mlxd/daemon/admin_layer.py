"""The admin layer's rules: how admin changes lie over what the files, environment and argv say (docs/admin.md).

Pure functions of configurations; the controller, which owns the layer, applies what they return.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any, Mapping

from mlxd.config import UNSET, ResolvedConfig, apply_overrides, table
from mlxd.daemon.actions import Patch, Replace, Reread
from mlxd.daemon.discovery import resolve_serving
from mlxd.daemon.served import model_label
from mlxd.errors import MlxdError

log = logging.getLogger("mlxd.daemon.reconcile")


def etag(generation: int, config_hash: str) -> str:
    """Names a generation of the configuration for If-Match (conflicting writes are refused)."""
    return hashlib.sha256(f"{generation}:{config_hash}".encode()).hexdigest()[:16]


def canonical(values: Mapping[str, Any]) -> dict[str, Any]:
    """Admin-layer keys in their canonical option names (any spelling without dashes is accepted)."""
    specs = table().by_key
    return {(specs[k].name if k in specs else k): v for k, v in values.items()}


def kept_overrides(overrides: Mapping[str, Any], fresh: ResolvedConfig, base: ResolvedConfig) -> dict[str, Any]:
    """The admin layer over a re-read of the files: an override stays unless the files now give its option
    another value than they did (the newer statement wins)."""
    kept = {}
    for name, value in overrides.items():
        if fresh.value(name) == base.value(name):
            kept[name] = value
        else:
            log.info("admin override of %s dropped: %s now sets it", name, fresh.provenance[name])
    return kept


def reread(argv: list[str], env: Mapping[str, str], overrides: Mapping[str, Any],
           base: ResolvedConfig) -> tuple[ResolvedConfig, ResolvedConfig, dict[str, Any]]:
    """The files read again with the startup argv and environment: (fresh, desired, the overrides kept), the
    desired configuration being fresh with the kept admin layer on top. Raises ConfigError."""
    fresh = resolve_serving(argv, env)
    kept = kept_overrides(overrides, fresh, base)
    return fresh, (apply_overrides(fresh, kept) if kept else fresh), kept


def loses_the_model(running: ResolvedConfig, desired: ResolvedConfig) -> str | None:
    """Why ``desired`` may not replace ``running``: a file that parses to no model (an editor's truncate-then-write,
    a lost model line) never unloads the served one; None when it may."""
    if running.is_router or not desired.is_router:
        return None
    return (f"the configuration names no model (model, hf-repo) while {model_label(running.config)} is served; "
            "the running configuration keeps serving (only an explicit unload, `mlxd admin unload`, empties it)")


def desired(action: Reread | Patch | Replace, *, running: ResolvedConfig, overrides: Mapping[str, Any],
            base: ResolvedConfig, argv: list[str], env: Mapping[str, str]
            ) -> tuple[ResolvedConfig, dict[str, Any], ResolvedConfig | None]:
    """The configuration ``action`` asks for, the admin layer that gives it, and the files' part when they were read
    again (blocking: the files are read and the layers resolved). Raises MlxdError when it cannot be built."""
    if isinstance(action, Reread):
        # The admin layer stays on top, less the options the files now set to something else (docs/admin.md).
        fresh, wanted, kept = reread(argv, env, overrides, base)
        refusal = loses_the_model(running, wanted)
        if refusal is not None:
            raise MlxdError(refusal)
        return wanted, kept, fresh
    if isinstance(action, Replace):
        fresh = resolve_serving(argv, env)
        return (apply_overrides(fresh, action.values) if action.values else fresh), canonical(action.values), fresh
    # UNSET drops an override, so it is not kept in the admin layer.
    layer = {k: v for k, v in {**overrides, **canonical(action.values)}.items() if v is not UNSET}
    return apply_overrides(running, action.values), layer, None
