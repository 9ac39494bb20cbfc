"""One rank of a distributed model, as a process of its own: ``python -m mlxd.engine.distributed.rank``.

MLX cannot initialise a second group in a process that has had one, so a group lives exactly as long as its rank
processes: the front end starts rank 0, each `mlxd rpc-server` starts its peer's rank, and a group that loses a
member is re-formed from fresh processes (docs/architecture.md). The spec comes as one JSON line on stdin. Rank 0
serves its front end over an inherited socket (link.py); the other ranks follow rank 0's steps (replicate.py) and
print one JSON line on stdout when they are ready, which their rpc-server passes on.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import mlx.core as mx

from mlxd.engine.distributed.protocol import RankSpec

log = logging.getLogger("mlxd.engine.distributed.rank")


def _environment(spec: RankSpec) -> tuple[str, Path | None]:
    """Point mx.distributed at the group (the variables mlx.launch would set): the backend name for init, and the
    ring's host file, which init reads once."""
    hostfile: Path | None = None
    os.environ["MLX_RANK"] = str(spec.rank)
    os.environ["MLX_WORLD_SIZE"] = str(spec.world)
    if spec.backend in ("ring", "auto"):
        fd, name = tempfile.mkstemp(prefix="mlxd-ring-", suffix=".json")
        with os.fdopen(fd, "w") as out:
            json.dump([[host] for host in spec.hosts], out)
        os.environ["MLX_HOSTFILE"] = name
        hostfile = Path(name)
    host, _, port = spec.hosts[0].rpartition(":")
    if spec.backend in ("nccl", "auto"):
        os.environ.setdefault("NCCL_HOST_IP", host)
        os.environ.setdefault("NCCL_PORT", port)
    if spec.backend in ("jaccl", "auto"):  # MLX_IBV_DEVICES (the RDMA devices) comes from the machine's own setup
        os.environ.setdefault("MLX_JACCL_COORDINATOR", spec.hosts[0])
    return "any" if spec.backend == "auto" else spec.backend, hostfile


def load_share(spec: RankSpec, group: mx.distributed.Group) -> tuple[Any, str]:
    """This rank's share of the model, read from its own disk: (LoadedModel, a line describing the share)."""
    from mlx.utils import tree_reduce

    from mlxd.engine.distributed.split import cut
    from mlxd.engine.loading.loader import load_model, resolve_model_source

    path = resolve_model_source(spec.model, None, offline=True)
    loaded = load_model(Path(path), lazy=True)
    shares = spec.tensor_split or [1.0] * spec.world
    shard = cut(loaded.model, spec.split_mode, group, shares)
    mx.eval(loaded.model.parameters())
    size = int(tree_reduce(lambda acc, a: acc + a.nbytes, loaded.model.parameters(), 0))
    return replace(loaded, size_bytes=size), shard


def build_worker(loaded: Any, spec: RankSpec, leader: bool) -> Any:
    """The model worker every rank runs; rank 0's scheduler ships each step's inputs to the others."""
    from mlxd.engine.batching.worker import ModelWorker
    from mlxd.engine.distributed.replicate import LeaderScheduler
    from mlxd.engine.settings import WorkerSettings

    settings = WorkerSettings.model_validate(spec.settings)
    kind = type("LeaderWorker", (ModelWorker,), {"scheduler_class": LeaderScheduler}) if leader else ModelWorker
    worker = kind(loaded, settings)
    # The compiled decode step swaps mlx-lm's caches for stand-ins and, for the llama family, runs a fused pass
    # that reads the layers' weights itself, past the sharded layers' sums and the stages' hand-offs: off here.
    worker.scheduler.compiled = None
    return worker


def _end_with_parent() -> None:
    """End this rank when the process that started it (the front end, or the rpc-server) is gone: a rank must not
    outlive its supervisor, whatever killed it (portable, unlike Linux's PR_SET_PDEATHSIG)."""
    import threading

    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(5)

    threading.Thread(target=watch, name="mlxd-rank-parent", daemon=True).start()


def main() -> int:
    _end_with_parent()
    logging.basicConfig(level=os.environ.get("MLXD_RANK_LOG", "WARNING"), stream=sys.stderr,
                        format=f"%(asctime)s rank %(process)d %(name)s: %(message)s")
    spec = RankSpec.model_validate_json(sys.stdin.readline())
    backend, hostfile = _environment(spec)
    started = time.monotonic()
    try:
        group = mx.distributed.init(strict=True, backend=backend)
    finally:  # read by now; with --cpu-jit, TMPDIR is a cache directory that no reboot empties
        if hostfile is not None:
            hostfile.unlink(missing_ok=True)
    if group.size() != spec.world or group.rank() != spec.rank:
        print(json.dumps({"state": "failed", "error": f"the group has rank {group.rank()} of {group.size()}, "
                          f"expected {spec.rank} of {spec.world}"}), flush=True)
        return 3
    from mlxd.engine.distributed.channel import GroupBroken, StepChannel
    from mlxd.engine.loading.warmup import warm_up

    loaded, shard = load_share(spec, group)
    worker = build_worker(loaded, spec, leader=spec.rank == 0)
    channel = StepChannel(group)
    if spec.rank == 0:
        from mlxd.engine.distributed.link import serve_front_end

        return serve_front_end(worker, channel, shard, int(os.environ["MLXD_RANK_LINK"]))
    if worker.settings.warmup:
        warm_up(loaded)  # rank 0's worker runs the same pass when it starts
    print(json.dumps({"state": "ready", "shard": shard, "memory_bytes": int(loaded.size_bytes),
                      "load_s": round(time.monotonic() - started, 3)}), flush=True)
    from mlxd.engine.distributed.replicate import follow

    try:
        with mx.stream(mx.new_thread_local_stream(mx.default_device())):
            follow(worker.scheduler, channel)
    except GroupBroken as exc:
        print(json.dumps({"state": "broken", "error": str(exc)}), flush=True)
        os._exit(4)  # the group cannot be used again; MLX's threads must not keep the process alive
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # MLX's communication threads would keep a finished rank alive
