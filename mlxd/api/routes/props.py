"""``GET /props`` (the server's facts and defaults) and ``POST /props`` (gated by ``--props``)."""

from __future__ import annotations

from typing import Any

from sanic import Blueprint, HTTPResponse, Request

from mlxd import __version__
from mlxd.api.body import json_object, parse
from mlxd.api.context import served_model, serving
from mlxd.api.errors import json_response
from mlxd.api.media import MARKER
from mlxd.api.media_parts import modalities_of
from mlxd.api.model_facts import ftype, n_ctx_slot, n_slots
from mlxd.api.state import ServingState
from mlxd.engine import ServedModel
from mlxd.config.webui import ui_settings
from mlxd.errors import NotSupported
from mlxd.schemas.props import ChatTemplateCaps, DefaultGenerationSettings, Modalities, Props, PropsUpdate, Success

bp = Blueprint("props")

PROPS_DISABLED = "This server does not support changing global properties. Start it with `--props`"
# One marker per process, as b10621 draws one at startup (clients splice it where media would go); the same one
# that chat media parts become and multimodal_data prompts are split at (api.media).
MEDIA_MARKER = MARKER

_SAMPLING_KEYS = (
    "temperature", "dynatemp_range", "dynatemp_exponent", "top_k", "top_p", "min_p", "top_n_sigma",
    "xtc_probability", "xtc_threshold", "typical_p", "repeat_last_n", "repeat_penalty", "presence_penalty",
    "frequency_penalty", "dry_multiplier", "dry_base", "dry_allowed_length", "dry_penalty_last_n", "mirostat",
    "mirostat_tau", "mirostat_eta", "adaptive_target", "adaptive_decay",
)


def default_params(state: ServingState, model: ServedModel) -> dict[str, Any]:
    """The server-wide request defaults in ``/slots`` params form (b10621's ``task_params::to_json``, short)."""
    sp = model.sampling_defaults
    cfg = state.config
    n_predict = int(cfg.n_predict)
    params: dict[str, Any] = {"seed": int(getattr(sp, "seed", -1)) & 0xFFFFFFFF}
    params.update({key: getattr(sp, key) for key in _SAMPLING_KEYS if hasattr(sp, key)})
    params.update(
        {
            "max_tokens": n_predict,
            "n_predict": n_predict,
            "n_keep": int(cfg.keep),
            "n_discard": 0,
            "ignore_eos": bool(getattr(sp, "ignore_eos", False)),
            "stream": False,
            "n_probs": int(getattr(sp, "n_probs", 0)),
            "min_keep": int(getattr(sp, "min_keep", 0)),
            "chat_format": "Content-only",
            "reasoning_format": "none",
            "reasoning_in_content": False,
            "generation_prompt": "",
            "samplers": list(getattr(sp, "samplers", ())),
            "speculative.types": (model.worker.speculative_info() or {"type": "none"})["type"],
            "timings_per_token": False,
            "post_sampling_probs": bool(getattr(sp, "post_sampling_probs", False)),
            "backend_sampling": False,
            "lora": [],
        }
    )
    return params


@bp.get("/props")
async def get_props(request: Request) -> HTTPResponse:
    return json_response(props_body(serving(request), served_model(request)))


# The llama-server build whose command line and HTTP surface mlxd serves.
UPSTREAM_BUILD = 10621


def build_name(info: dict[str, Any]) -> str:
    """b10621's ``b<build>-<commit>`` shape (``b10621-c1d0e7a0``), which clients parse for the build number: the
    build mlxd is compatible with, then mlxd's own version where llama.cpp puts its commit."""
    return str(info.get("fingerprint") or f"b{UPSTREAM_BUILD}-mlxd-{__version__}")


def build_info(state: ServingState) -> str:
    """``build_info``: :func:`build_name`, and the BLAS mlx's CPU backend uses."""
    text = build_name(state.build_info)
    blas = state.build_info.get("cpu_blas")
    return f"{text} (cpu-blas: {blas})" if blas else text


def props_body(state: ServingState, model: ServedModel, *, sleeping: bool = False) -> dict[str, Any]:
    """The ``GET /props`` object for the model in service (``sleeping``: as cached when the server sleeps)."""
    cfg = state.config
    template = model.chat_template
    source = template.source if template is not None else ""
    props = Props(
        default_generation_settings=DefaultGenerationSettings(
            params=default_params(state, model), n_ctx=n_ctx_slot(model)
        ),
        total_slots=n_slots(model),
        model_alias=model.name,
        model_ftype=ftype(model),
        model_path=str(model.loaded.path),
        media_marker=MEDIA_MARKER,
        modalities=Modalities(**{k: True for k in modalities_of(model).names()}),
        endpoint_slots=bool(cfg.slots),
        endpoint_props=bool(cfg.props),
        endpoint_metrics=bool(cfg.metrics),
        ui=bool(cfg.webui),
        ui_settings=ui_settings(cfg.webui_config, cfg.webui_config_file),
        chat_template=source,
        # What rendering probe conversations showed when the template loaded (mlxd.engine.chat.caps).
        chat_template_caps=ChatTemplateCaps(**template.caps.to_dict()) if template is not None else ChatTemplateCaps(),
        bos_token=template.bos_token if template is not None else "",
        eos_token=template.eos_token if template is not None else "",
        build_info=build_info(state),
        is_sleeping=sleeping,
    )
    body = props.model_dump()
    kv = model.worker.kv_cache_info()
    if kv["explicit"]:  # mlxd's own key, only where -ctk/-ctv is set: b10621's /props has no KV cache report
        body["kv_cache"] = kv
    spec = model.worker.speculative_info()
    if spec is not None:  # mlxd's own key, only with a draft model: drafted and accepted totals
        body["speculative"] = spec
    if template is not None and template.tool_use_source:
        body["chat_template_tool_use"] = template.tool_use_source
    return body


@bp.post("/props")
async def post_props(request: Request) -> HTTPResponse:
    if not serving(request).config.props:
        raise NotSupported(PROPS_DISABLED)
    parse(PropsUpdate, json_object(request))
    return json_response(Success().model_dump())
