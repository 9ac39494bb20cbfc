"""Checkpoints from the Hugging Face hub: the local cache first, a download only when allowed.

The cache is huggingface_hub's own layout (``models--OWNER--NAME/snapshots/REV``), under ``--model-store-root``
when given, so checkpoints fetched by ``hf download`` or mlx-lm are found and reused.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Mapping
from pathlib import Path

from mlxd.errors import EngineError

log = logging.getLogger("mlxd.engine.loading.hub")

# What an MLX checkpoint needs: mlx-lm's own download patterns.
ALLOW_PATTERNS = [
    "*.json",
    "model*.safetensors",
    "*.py",
    "tokenizer.model",
    "*.tiktoken",
    "tiktoken.model",
    "*.txt",
    "*.jsonl",
    "*.jinja",
]

_TRUE_WORDS = {"1", "true", "yes", "on"}


def env_offline(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``HF_HUB_OFFLINE`` forbids downloads."""
    env = os.environ if environ is None else environ
    return env.get("HF_HUB_OFFLINE", "").strip().lower() in _TRUE_WORDS


def cached_snapshot(repo_id: str, store_root: str | Path | None) -> Path | None:
    """The complete cached snapshot of ``repo_id`` (its ``main`` ref), or None when it is absent or partial."""
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(repo_id, "config.json", cache_dir=store_root)
    if not isinstance(found, str):
        return None
    snapshot = Path(found).parent
    return snapshot if _weights_complete(snapshot) else None


def _weights_complete(snapshot: Path) -> bool:
    index = snapshot / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = set(json.loads(index.read_text())["weight_map"].values())
        except (OSError, ValueError, KeyError):
            return False
        return all((snapshot / shard).is_file() for shard in shards)
    return any(snapshot.glob("model*.safetensors"))


def fetch(repo_id: str, *, offline: bool, hf_token: str | None, store_root: str | Path | None) -> Path:
    """The local snapshot of ``repo_id``: from the cache, else downloaded (a progress bar on a terminal).

    Raises :class:`EngineError` naming the repository and the cause. The token is passed to the hub and
    nowhere else.
    """
    snapshot = cached_or_downloadable(repo_id, offline=offline, store_root=store_root)
    if snapshot is not None:
        log.info("model %s: using the cached snapshot %s", repo_id, snapshot)
        return snapshot
    return _download(repo_id, hf_token=hf_token, store_root=store_root)


def cached_or_downloadable(repo_id: str, *, offline: bool, store_root: str | Path | None) -> Path | None:
    """What ``fetch`` decides before any download: the cached snapshot, or None when a download is allowed;
    raises :class:`EngineError` when the snapshot is absent and downloads are forbidden."""
    snapshot = cached_snapshot(repo_id, store_root)
    if snapshot is not None:
        return snapshot
    where = f" under {store_root}" if store_root else ""
    if offline or env_offline():
        why = "--offline" if offline else "HF_HUB_OFFLINE"
        raise EngineError(f"model {repo_id}: not in the local cache{where}, and {why} forbids downloading it")
    return None


def _download(repo_id: str, *, hf_token: str | None, store_root: str | Path | None) -> Path:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    log.info("model %s: downloading to %s", repo_id, store_root or "the Hugging Face cache")
    quiet = not sys.stderr.isatty()
    was_disabled = are_progress_bars_disabled()
    if quiet:
        disable_progress_bars()
    try:
        path = snapshot_download(
            repo_id, cache_dir=store_root, token=hf_token or None, allow_patterns=ALLOW_PATTERNS
        )
    except GatedRepoError as exc:
        raise EngineError(f"model {repo_id}: the repository is gated; pass --hf-token with access") from exc
    except RepositoryNotFoundError as exc:
        raise EngineError(
            f"model {repo_id}: no such repository on the hub (or it is private; pass --hf-token)"
        ) from exc
    except RevisionNotFoundError as exc:
        raise EngineError(f"model {repo_id}: the revision does not exist") from exc
    except (OfflineModeIsEnabled, LocalEntryNotFoundError) as exc:
        raise EngineError(f"model {repo_id}: not in the local cache and the hub cannot be reached") from exc
    except HfHubHTTPError as exc:
        raise EngineError(f"model {repo_id}: download failed: {_first_line(exc)}") from exc
    except OSError as exc:
        raise EngineError(f"model {repo_id}: download failed: {exc}") from exc
    finally:
        if quiet and not was_disabled:
            enable_progress_bars()
    return Path(path)


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def repo_of_snapshot(path: Path) -> str | None:
    """``owner/name`` when ``path`` is a snapshot inside a hub cache, else None."""
    parts = path.resolve().parts if path.exists() else path.parts
    if len(parts) >= 3 and parts[-2] == "snapshots" and parts[-3].startswith("models--"):
        return parts[-3].removeprefix("models--").replace("--", "/", 1)
    return None


def cached_models(store_root: str | Path | None) -> dict[str, str]:
    """The model store's listing for router mode: ``owner/name`` -> snapshot directory, for every cached repository
    whose ``main`` snapshot is a complete MLX checkpoint (a config.json and its safetensors weights)."""
    from huggingface_hub import constants

    root = Path(store_root) if store_root else Path(constants.HF_HUB_CACHE)
    if not root.is_dir():
        return {}
    found: dict[str, str] = {}
    for repo_dir in sorted(root.glob("models--*--*")):
        repo_id = repo_dir.name.removeprefix("models--").replace("--", "/", 1)
        snapshot = cached_snapshot(repo_id, root)
        if snapshot is not None and (snapshot / "config.json").is_file():
            found[repo_id] = str(snapshot)
    return found
