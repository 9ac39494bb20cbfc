"""The admin API's wire formats: the request and response bodies the admin routes validate and build.

Responses are JSON objects; every refusal is ``{"error": {"code": CODE, "message": ...}}`` with a stable code,
rendered by mlxd.admin.app.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

DaemonStateName = Literal["starting", "serving", "reloading", "draining", "stopped"]
ModelStateName = Literal["unloaded", "loading", "loaded", "draining", "failed"]


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LastErrorView(_Wire):
    """The last refused change: what triggered it, why, and when (Unix time)."""

    trigger: str
    message: str
    time: float


class ModelView(_Wire):
    name: str
    state: ModelStateName
    error: str | None = None


class PeerView(_Wire):
    """One member of a distributed model's group (``--rpc``): rank 0 is the front end's own rank process."""

    model: str
    address: str
    rank: int
    shard: str
    state: str  # forming, connecting, loading, ready, missing, refused, lost, exited, down
    memory_bytes: int
    last_heartbeat: float | None = None


class CacheDiskView(_Wire):
    """The prompt cache's disk tier (``--cache-disk``) over the process's life: every directory opened."""

    hits: int  # prompts that took their prefix from disk
    misses: int  # lookups the tier could not serve (none, or not worth reading)
    entries: int
    bytes: int  # on disk now
    evictions: int  # entries removed under --cache-disk-max or expired
    bytes_read: int
    bytes_written: int
    tokens_read: int
    writes: int
    dropped: int  # entries not written: queue full or read-only
    corrupt: int  # files refused (checksum, truncated, foreign)
    write_errors: int
    dirs: dict[str, str]  # directory -> rw, ro or off


class StatusResponse(_Wire):
    state: DaemonStateName
    generation: int
    config_hash: str
    uptime: float
    last_error: LastErrorView | None
    pending_restart: list[str]
    models: list[ModelView]
    etag: str | None = None
    cache_disk: CacheDiskView | None = None  # None: no --cache-disk in this process
    peers: list[PeerView] | None = None  # None: no model across machines (--rpc)


class OptionView(_Wire):
    value: Any
    source: str


class ConfigResponse(_Wire):
    """The resolved configuration (``mlxd config explain --format json``'s shape) with the admin layer."""

    generation: int
    config_hash: str
    etag: str
    options: dict[str, OptionView]
    models: dict[str, dict[str, OptionView]] | None = None
    overrides: dict[str, Any] = Field(default_factory=dict)


class ChangeResponse(_Wire):
    """What a change did; ``dry_run`` for /v1/config/validate."""

    applied: bool
    generation: int
    config_hash: str
    changed: list[str]
    pending_restart: list[str]
    dry_run: bool = False
    error: str | None = None
    etag: str | None = None


class ModelsResponse(_Wire):
    mode: Literal["single", "router"]
    models: list[ModelView]


class ModelsPost(_Wire):
    """``POST /v1/models``: ``{"action": "load"|"unload", "name": NAME}``."""

    action: Literal["load", "unload"]
    name: str


class LoraAdapterView(_Wire):
    id: int
    path: str
    scale: float


class LoraResponse(_Wire):
    model: str | None
    adapters: list[LoraAdapterView]


class LoggingResponse(_Wire):
    """The log options with their sources."""

    options: dict[str, OptionView]


class SlotsResponse(_Wire):
    """``GET /v1/slots``: each loaded model's slots, as the public ``GET /slots`` shows them (never the prompt text);
    in router mode every loaded model, in single-model mode the one in service."""

    models: dict[str, list[dict[str, Any]]]


class MetricsSummaryResponse(_Wire):
    """``GET /v1/metrics/summary``: the counters behind the public ``/metrics``, read without a scrape."""

    time: float  # Unix time of the reading, so that a poller can take rates between two readings
    tokens_predicted_total: int  # llamacpp:tokens_predicted_total
    prompt_tokens_total: int  # llamacpp:prompt_tokens_total
    requests_total: int  # generation requests received (the sum of mlxd_requests_total)
    requests_processing: int  # llamacpp:requests_processing: requests running in a slot
    requests_deferred: int  # llamacpp:requests_deferred: requests waiting for a slot (the queue)
