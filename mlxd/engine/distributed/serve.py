"""The front end's side of a distributed model: its facts, its remote worker and the group that serves it."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from mlxd.engine.distributed.group import Group, GroupPlan
from mlxd.engine.distributed.remote import NOT_DISTRIBUTED, RemoteWorker
from mlxd.engine.distributed.rpc_server import read_token
from mlxd.errors import EngineError

log = logging.getLogger("mlxd.engine.distributed")

# How long startup waits for the group's first forming before serving 503s while it keeps trying.
FIRST_FORM_S = 120.0


def serve_group(spec: Any, path: Path) -> tuple[Any, RemoteWorker]:
    """Facts of the checkpoint at ``path`` (tokenizer, config; no weight is read here) and a worker served by a
    group of ``spec.distributed``'s machines, once formed (``spec``: an engine.spec.ModelSpec)."""
    from mlxd.engine.loading.loader import load_model
    from mlxd.engine.vlm import modalities

    dist = spec.distributed
    if modalities(path).multimodal and spec.media:
        raise EngineError(f"images and audio {NOT_DISTRIBUTED}: give --no-mmproj to serve {path.name} as text")
    try:
        token = read_token(dist.token_file)
    except (OSError, ValueError) as exc:
        raise EngineError(f"--rpc-token-file: {exc}") from exc
    loaded = load_model(path, lazy=True)  # the front end holds no weight: rank 0 is a process of its own
    worker = RemoteWorker(loaded, spec.worker)
    plan = GroupPlan(model=spec.source.hf_repo or str(path), peers=dist.peers, split_mode=dist.split_mode,
                     tensor_split=dist.tensor_split, backend=dist.backend, token=token,
                     settings=spec.worker.model_dump(mode="json"))
    group = Group(plan, worker)
    worker.group = group
    group.start()
    if not group.wait_first(FIRST_FORM_S):
        log.warning("the group has not formed in %.0f s; serving 503 until it does", FIRST_FORM_S)
    return loaded, worker
