"""What the operator console reads of the public surface's live state, without going through HTTP: each loaded
model's slots (``GET /slots``'s entries) and the load counters ``/metrics`` reports. The daemon hands both to the
admin listener, which does not import the api."""

from __future__ import annotations

from typing import Any

from mlxd.api.model_facts import slot_entries
from mlxd.api.state import ServingState
from mlxd.engine import ServedModel


def loaded_models(state: ServingState) -> list[ServedModel]:
    """The models in service: the one model, or in router mode every loaded one (a loading one has no worker)."""
    if state.pool is not None:
        return [e.served for e in state.pool.entries() if e.served is not None and e.state == "loaded"]
    return [state.model] if state.model is not None else []


def slots_by_model(state: ServingState) -> dict[str, list[dict[str, Any]]]:
    """``GET /slots``'s entries (never the prompt text) for each model in service, by its name."""
    return {model.name: slot_entries(model, debug=False) for model in loaded_models(state)}


def load_summary(state: ServingState) -> dict[str, int]:
    """The counters behind ``/metrics``'s ``tokens_predicted_total``, ``prompt_tokens_total``,
    ``requests_processing`` and ``requests_deferred``, and the requests received. Read without a scrape: the public
    ``/metrics``'s throughput windows are left as they are."""
    processing = deferred = 0
    for model in loaded_models(state):
        running = sum(1 for slot in model.worker.slots() if slot.get("is_processing"))
        processing += running
        deferred += max(0, int(getattr(model.worker, "n_in_flight", running)) - running)
    metrics = state.metrics
    return {
        "tokens_predicted_total": int(getattr(metrics, "tokens_predicted", 0)),
        "prompt_tokens_total": int(getattr(metrics, "prompt_tokens", 0)),
        "requests_total": sum(dict(getattr(metrics, "requests_total", {})).values()),
        "requests_processing": processing,
        "requests_deferred": deferred,
    }
