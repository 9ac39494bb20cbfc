"""Facts about the model in service as b10621's ``/props``, ``/v1/models`` and ``/slots`` report them."""

from __future__ import annotations

import os
from typing import Any, cast

from mlxd.engine import ServedModel

# b10621 prints the slot's prompt and generated text on /slots only when this variable is set.
SLOTS_DEBUG_ENV = "LLAMA_SERVER_SLOTS_DEBUG"


def slot_entries(model: ServedModel, debug: bool | None = None) -> list[dict[str, Any]]:
    """``GET /slots`` entries from the worker; prompt and generated text only in debug mode."""
    if debug is None:
        debug = bool(os.environ.get(SLOTS_DEBUG_ENV))
    entries = []
    for slot in model.worker.slots(debug):
        entry = dict(slot)
        if not debug:
            entry.pop("prompt", None)
            entry.pop("generated", None)
        entries.append(entry)
    return entries


def n_ctx_slot(model: ServedModel) -> int:
    """The context each slot gets (b10621's ``n_ctx_slot``)."""
    return int(model.worker.n_ctx_slot)


def n_slots(model: ServedModel) -> int:
    """How many slots the model's worker has (``--parallel``, resolved)."""
    return int(model.worker.settings.n_parallel)


def ftype(model: ServedModel) -> str:
    """The weights' storage type in llama.cpp's words (``all F32``), or the MLX quantization."""
    config = model.loaded.config or {}
    quant = config.get("quantization") or config.get("quantization_config")
    if isinstance(quant, dict) and quant.get("bits"):
        return f"Q{quant['bits']} (mlx, group size {quant.get('group_size', 64)})"
    from mlx.utils import tree_flatten  # imported here: the api only needs mlx for this one fact

    params = cast(list[tuple[str, Any]], tree_flatten(model.loaded.model.parameters()))
    if not params:
        return "unknown"
    dtype = str(params[0][1].dtype).rsplit(".", 1)[-1]
    return f"all {dtype.replace('float', 'F').replace('bfloat', 'BF').upper()}"


def n_embd(model: ServedModel) -> int:
    config = model.loaded.config or {}
    for key in ("hidden_size", "n_embd", "d_model", "dim"):
        if isinstance(config.get(key), int):
            return int(config[key])
    return 0
