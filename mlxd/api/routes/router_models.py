"""b10621's router routes: the model inventory (``GET /models``, ``/v1/models``), ``POST /models/load``,
``POST /models/unload``, ``GET /models/sse``, and the router's own ``GET /props``.

The router-only routes are mounted always and answer the generic 404 without a pool, as b10621 does in
single-model mode, where they are not registered. The inventory and the router's props replace the single-model
handlers in router mode (see mlxd.api.router_mode, which picks the handler by mode before routing).
"""

from __future__ import annotations

import time
from typing import Any, AsyncIterator

from sanic import Blueprint, HTTPResponse, Request
from sanic.exceptions import NotFound

from mlxd.api import sse
from mlxd.api.body import json_object
from mlxd.api.context import serving
from mlxd.api.errors import json_response, not_found
from mlxd.api.model_facts import ftype, n_ctx_slot, n_embd
from mlxd.api.routes.props import build_info
from mlxd.api.state import RouterPool, ServingOwner, ServingState
from mlxd.config import ModelResolved, OptionSpec, is_default, table
from mlxd.config.change import ChangeResult
from mlxd.config.webui import ui_settings
from mlxd.errors import MlxdError

bp = Blueprint("router_models")

# Options a model's command line does not show: the router's own, and those every child gets from the router.
_NOT_SHOWN = frozenset({"host", "port", "alias", "tags", "api-key", "api-key-file", "ssl-key-file", "ssl-cert-file",
                        "models-dir", "models-max", "models-preset", "models-autoload", "model", "hf-repo",
                        "mmproj", "config", "admin-listen", "admin-token-file"})
# mlxd's states in b10621's vocabulary: a draining model takes no new requests, so clients see it unloaded.
_STATUS = {"unloaded": "unloaded", "loading": "loading", "loaded": "loaded", "draining": "unloaded",
           "failed": "unloaded"}
_SOURCE = {"store": "cache", "models-dir": "models_dir", "preset": "preset", "toml": "preset"}
ARCHITECTURE = {"input_modalities": ["text"], "output_modalities": ["text"]}


def _pool(request: Request) -> RouterPool:
    pool = serving(request).pool
    if pool is None:
        raise NotFound("File Not Found")
    return pool


def _model_name(request: Request) -> str:
    name = json_object(request).get("model")
    return name if isinstance(name, str) else ""


# -- the inventory ----------------------------------------------------------------------------------------------
def _spelling(spec: OptionSpec) -> str:
    """The last long spelling, as b10621 renders a child's option (docs/precedence.md rule 2.13)."""
    return spec.long[-1] if spec.long else "--" + spec.name


def _shown(model: ModelResolved) -> list[tuple[OptionSpec, Any]]:
    """The options a model sets itself (preset, models-dir, store, TOML or the router's command line); the
    environment and config.ini are inherited, as a child inherits them, and a child reads its checkpoint's own
    generation_config.json itself, so none of them is part of its line."""
    out = []
    for spec in table():
        source = model.provenance[spec.name]
        if spec.name in _NOT_SHOWN or spec.secret or is_default(source) \
                or source.startswith(("env:", "ini:", "checkpoint:")):
            continue
        value = getattr(model.config, spec.field)
        if value is not None:
            out.append((spec, value))
    return out


def _arg_words(spec: OptionSpec, value: Any) -> list[str]:
    if spec.is_bool:
        if value:
            return [_spelling(spec)]
        return [spec.negatives[-1]] if spec.negatives else []
    if isinstance(value, list):
        return [_spelling(spec), ",".join(str(v) for v in value)]
    return [_spelling(spec), str(value)]


def _ini_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)


def child_args(model: ModelResolved) -> list[str]:
    """The llama-server command line b10621 would start this model with (``status.args``)."""
    words = ["llama-server", "--host", "127.0.0.1", "--port", "0"]
    for spec, value in _shown(model):
        words += _arg_words(spec, value)
    words += ["--alias", model.name]
    cfg = model.config
    if cfg.hf_repo:
        words += ["--hf-repo", str(cfg.hf_repo)]
    elif cfg.model:
        words += ["--model", str(cfg.model)]
    return words


def preset_text(model: ModelResolved) -> str:
    """The model's preset section as INI text (``status.preset``), without the keys the router reserves."""
    lines = [f"[{model.name}]"]
    for spec, value in _shown(model):
        lines.append(f"{_spelling(spec).lstrip('-')} = {_ini_value(value)}")
    cfg = model.config
    if cfg.hf_repo:
        lines.append(f"hf-repo = {cfg.hf_repo}")
    elif cfg.model:
        lines.append(f"model = {cfg.model}")
    return "\n".join(lines) + "\n\n"


def _meta(served: Any) -> dict[str, Any]:
    loaded = served.loaded
    return {"vocab_type": True, "n_vocab": loaded.vocab_size, "n_ctx": n_ctx_slot(served),
            "n_ctx_train": loaded.n_ctx_train, "n_embd": n_embd(served), "n_params": loaded.n_params,
            "size": loaded.size_bytes, "ftype": ftype(served)}


def inventory(state: ServingState) -> dict[str, Any]:
    """``GET /models`` in router mode: every model the router knows of, with its status."""
    now = int(time.time())
    data = []
    assert state.pool is not None  # router mode
    for entry in state.pool.entries():
        model: ModelResolved = entry.spec
        status: dict[str, Any] = {"value": _STATUS[entry.state], "args": child_args(model)}
        if model.source in ("preset", "toml"):
            status["preset"] = preset_text(model)
        if entry.state == "failed":
            status.update(failed=True, exit_code=1)
        item: dict[str, Any] = {
            "id": model.name, "aliases": entry.aliases, "tags": list(model.config.tags or []), "object": "model",
            "owned_by": "llamacpp", "created": now, "status": status, "architecture": ARCHITECTURE,
            "source": _SOURCE.get(model.source, model.source), "can_remove": False,
        }
        if entry.state == "loaded" and entry.served is not None:
            item["meta"] = _meta(entry.served)
        data.append(item)
    return {"data": data, "object": "list"}


async def inventory_response(request: Request) -> HTTPResponse:
    """``GET /models[?reload=1]``: with a non-empty ``reload``, the sources are re-read first (rule 2.17) through
    the reconcile path; a refused reload answers its error and changes nothing."""
    state = serving(request)
    if request.args.get("reload") and state.controller is not None:
        result = await state.controller.reload("GET /models?reload=1")
        if result.error:
            raise MlxdError(f"reload refused: {result.error}")
    return json_response(inventory(state))


def router_props(state: ServingState) -> HTTPResponse:
    """``GET /props`` without ``?model=``: the router's own facts."""
    pool = state.pool
    assert pool is not None  # router mode
    return json_response({
        "role": "router", "max_instances": pool.models_max, "models_autoload": pool.autoload,
        "model_alias": "llama-server", "model_path": "none",
        "default_generation_settings": {"params": None, "n_ctx": 0},
        "ui_settings": ui_settings(state.config.webui_config, state.config.webui_config_file),
        "build_info": build_info(state),
        "cors_proxy_enabled": False,
    })


# -- management -------------------------------------------------------------------------------------------------
@bp.post("/models/load")
async def models_load(request: Request) -> HTTPResponse:
    """Start loading a model; answers once the load has started (an eviction it needs has finished)."""
    pool = _pool(request)
    name = _model_name(request)
    if pool.canonical(name) is None:
        return not_found()  # b10621's HTTP layer rewrites this 404 to the generic body
    await _change(await _owner(request).load_pool_model(name, trigger="api:models/load"))
    return json_response({"success": True})


@bp.post("/models/unload")
async def models_unload(request: Request) -> HTTPResponse:
    """Stop a running model once its in-flight requests finish."""
    _pool(request)
    await _change(await _owner(request).unload_pool_model(_model_name(request), trigger="api:models/unload"))
    return json_response({"success": True})


def _owner(request: Request) -> ServingOwner:
    owner = serving(request).controller
    if owner is None:
        raise MlxdError("the router's pool changes through the daemon's reconcile path, which this app lacks")
    return owner


async def _change(result: ChangeResult) -> None:
    if result.error:
        raise MlxdError(result.error)


@bp.get("/models/sse")
async def models_sse(request: Request) -> None:
    """Model status events as they happen (no event on connect, the headers at once); open until the client leaves
    or the daemon stops."""
    pool = _pool(request)
    queue = pool.subscribe()

    async def frames() -> AsyncIterator[str]:
        while True:
            message = await queue.get()
            if message is None:  # the daemon is stopping
                return
            yield sse.data(message)

    try:
        await sse.stream(request, frames(), open_now=True)  # open once subscribed, events or not
    finally:
        pool.unsubscribe(queue)
