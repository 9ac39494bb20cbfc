"""What the front end, `mlxd rpc-server` and the rank processes say to each other (pydantic at each boundary).

The control channel (front end <-> rpc-server, TCP) is JSON lines. A front end opens with ``hello`` and the shared
token; the peer answers ``welcome`` or ``refused`` and closes. Then: ``reserve`` (the peer picks a free port for its
rank's data channel), ``join`` (a RankSpec: the peer starts its rank process), ``leave`` (end it). The peer sends
``heartbeat`` every HEARTBEAT_S seconds with its rank's state and memory, and ``rank_exited`` when it ends.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

HEARTBEAT_S = 0.5
# A peer that has said nothing for this long is lost (its machine or its link may be down without a reset).
SILENCE_S = 3.0

Backend = Literal["ring", "jaccl", "nccl", "auto"]
SplitMode = Literal["layer", "row"]


class RankSpec(BaseModel):
    """One rank's share of a group: what it loads and whom it meets."""

    model_config = ConfigDict(extra="forbid")

    model: str  # the checkpoint directory (or repo id) as the peer finds it on its own disk or hub cache
    rank: int = Field(ge=0)
    world: int = Field(ge=2)
    backend: Backend = "ring"
    hosts: list[str]  # the data channel's "ip:port" of every rank, rank order
    split_mode: SplitMode = "layer"
    tensor_split: list[float] = Field(default_factory=list)  # shares per rank; empty: even
    settings: dict[str, Any]  # engine.settings.WorkerSettings as JSON
    group_id: str = ""


class PeerState(BaseModel):
    """A peer as the front end knows it, for status."""

    address: str
    rank: int
    shard: str = ""
    state: str = "unknown"  # missing, connecting, loading, ready, lost, refused
    memory_bytes: int = 0
    last_heartbeat: float | None = None
    error: str | None = None


def line(message: dict[str, Any]) -> bytes:
    return (json.dumps(message, separators=(",", ":")) + "\n").encode()


def parse(raw: bytes) -> dict[str, Any]:
    value = json.loads(raw)
    if not isinstance(value, dict) or not isinstance(value.get("op"), str):
        raise ValueError("a control message is a JSON object with an `op`")
    return value
