"""Resolving the configuration with the model store's listing, so router mode sees cached models too.

The store is ``--model-store-root`` when given, else the Hugging Face hub cache; it can only be listed once the
configuration says where it is, so a router configuration is resolved twice (the listing is cheap: directory
entries and one ``config.json`` lookup per repository).
"""

from __future__ import annotations

from collections.abc import Mapping

from mlxd.config import ResolvedConfig, resolve


def resolve_serving(argv: list[str], env: Mapping[str, str]) -> ResolvedConfig:
    """``resolve(argv, env)``, plus the model store's ``owner/name`` snapshots in router mode (docs/precedence.md
    rule 2.9: cache < --models-dir < preset)."""
    resolved = resolve(argv, env)
    if not resolved.is_router:
        return resolved
    from mlxd.engine import cached_models

    store = cached_models(resolved.config.model_store_root)
    return resolve(argv, env, store_models=store) if store else resolved
