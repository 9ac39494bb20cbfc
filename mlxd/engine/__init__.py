"""MLX inference behind one face: loading a model, its worker and batch scheduler, chat templates, sampling,
constraints, images and audio. The api and the daemon import from here, never from the modules below.

Where things live: ``loading/`` (checkpoint, hub cache, placement, RoPE, KV types, LoRA), ``batching/`` (the model
worker and its scheduler, slots, the prompt cache and its disk tier), ``speculative/``, ``sampling/``,
``constrain/``, ``chat/``, ``vlm/``, ``cpu/`` (the BLAS under MLX); docs/architecture.md has the table.

The names load on first use (PEP 562): ``preload_blas`` must run before anything imports mlx, and the multimodal
worker needs the ``mlxd[multimodal]`` extra, so importing the face itself imports neither.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mlxd.engine.batching.counters import DecodeCounter
    from mlxd.engine.batching.prompt_cache.disk_tier import summary as disk_cache_summary
    from mlxd.engine.batching.worker import ModelWorker
    from mlxd.engine.chat import (
        apply_chat_template,
        ChatDelta,
        ChatOptions,
        ChatOutputStream,
        ChatPrompt,
        ChatTemplate,
        ChatTemplateError,
        load_chat_template,
        THINK_CLOSE,
        THINK_OPEN,
        tool_call_format,
    )
    from mlxd.engine.chat.messages import content_parts_text
    from mlxd.engine.constrain import (
        chat_constraint,
        ConstraintSpec,
        request_constraint,
        server_constraint,
        ServerConstraint,
    )
    from mlxd.engine.cpu.blas import BlasMode, BlasReport, check as check_blas, GemvMode, preload as preload_blas
    from mlxd.engine.cpu.attention import install as install_cpu_attention
    from mlxd.engine.cpu.jit import JitMode, prepare as prepare_jit
    from mlxd.engine.distributed.serve import serve_group
    from mlxd.engine.embed import check_embedding_options
    from mlxd.engine.loading.devices import available_devices, MIB
    from mlxd.engine.loading.hub import cached_models
    from mlxd.engine.loading.loader import load_model, LoadedModel, locate_model_source
    from mlxd.engine.loading.lora import adapter_specs, attach_adapters, check_adapters
    from mlxd.engine.loading.rope import model_overrides, RopeOptions
    from mlxd.engine.memory import release_freed_memory
    from mlxd.engine.sampling import apply_request, SamplingParams
    from mlxd.engine.sampling.defaults import sampling_defaults
    from mlxd.engine.served import ServedModel
    from mlxd.engine.spec import ModelSource, ModelSpec, TemplateSpec
    from mlxd.engine.threads import run_on_own_thread
    from mlxd.engine.types import (
        ErrorEvent,
        FinalEvent,
        GenerationRequest,
        ProgressEvent,
        ReasoningSpec,
        Timings,
        TokenEvent,
        TokenProb,
    )
    from mlxd.engine.vlm import Modalities, modalities, TEXT_ONLY
    from mlxd.engine.vlm.inputs import Medium
    from mlxd.engine.vlm.load import load_multimodal
    from mlxd.engine.vlm.worker import make_worker as make_multimodal_worker

# Each public name: (its module, its name there). tests/unit/test_architecture.py holds this table and the imports
# above (what mypy reads) to the same names.
_EXPORTS: dict[str, tuple[str, str]] = {
    "adapter_specs": ("mlxd.engine.loading.lora", "adapter_specs"),
    "apply_chat_template": ("mlxd.engine.chat", "apply_chat_template"),
    "apply_request": ("mlxd.engine.sampling", "apply_request"),
    "attach_adapters": ("mlxd.engine.loading.lora", "attach_adapters"),
    "available_devices": ("mlxd.engine.loading.devices", "available_devices"),
    "BlasMode": ("mlxd.engine.cpu.blas", "BlasMode"),
    "BlasReport": ("mlxd.engine.cpu.blas", "BlasReport"),
    "cached_models": ("mlxd.engine.loading.hub", "cached_models"),
    "chat_constraint": ("mlxd.engine.constrain", "chat_constraint"),
    "ChatDelta": ("mlxd.engine.chat", "ChatDelta"),
    "ChatOptions": ("mlxd.engine.chat", "ChatOptions"),
    "ChatOutputStream": ("mlxd.engine.chat", "ChatOutputStream"),
    "ChatPrompt": ("mlxd.engine.chat", "ChatPrompt"),
    "ChatTemplate": ("mlxd.engine.chat", "ChatTemplate"),
    "ChatTemplateError": ("mlxd.engine.chat", "ChatTemplateError"),
    "check_adapters": ("mlxd.engine.loading.lora", "check_adapters"),
    "check_blas": ("mlxd.engine.cpu.blas", "check"),
    "check_embedding_options": ("mlxd.engine.embed", "check_embedding_options"),
    "ConstraintSpec": ("mlxd.engine.constrain", "ConstraintSpec"),
    "content_parts_text": ("mlxd.engine.chat.messages", "content_parts_text"),
    "DecodeCounter": ("mlxd.engine.batching.counters", "DecodeCounter"),
    "disk_cache_summary": ("mlxd.engine.batching.prompt_cache.disk_tier", "summary"),
    "ErrorEvent": ("mlxd.engine.types", "ErrorEvent"),
    "FinalEvent": ("mlxd.engine.types", "FinalEvent"),
    "GemvMode": ("mlxd.engine.cpu.blas", "GemvMode"),
    "JitMode": ("mlxd.engine.cpu.jit", "JitMode"),
    "GenerationRequest": ("mlxd.engine.types", "GenerationRequest"),
    "load_chat_template": ("mlxd.engine.chat", "load_chat_template"),
    "load_model": ("mlxd.engine.loading.loader", "load_model"),
    "load_multimodal": ("mlxd.engine.vlm.load", "load_multimodal"),
    "LoadedModel": ("mlxd.engine.loading.loader", "LoadedModel"),
    "locate_model_source": ("mlxd.engine.loading.loader", "locate_model_source"),
    "make_multimodal_worker": ("mlxd.engine.vlm.worker", "make_worker"),
    "Medium": ("mlxd.engine.vlm.inputs", "Medium"),
    "MIB": ("mlxd.engine.loading.devices", "MIB"),
    "Modalities": ("mlxd.engine.vlm", "Modalities"),
    "modalities": ("mlxd.engine.vlm", "modalities"),
    "model_overrides": ("mlxd.engine.loading.rope", "model_overrides"),
    "ModelSource": ("mlxd.engine.spec", "ModelSource"),
    "ModelSpec": ("mlxd.engine.spec", "ModelSpec"),
    "ModelWorker": ("mlxd.engine.batching.worker", "ModelWorker"),
    "preload_blas": ("mlxd.engine.cpu.blas", "preload"),
    "prepare_jit": ("mlxd.engine.cpu.jit", "prepare"),
    "install_cpu_attention": ("mlxd.engine.cpu.attention", "install"),
    "ProgressEvent": ("mlxd.engine.types", "ProgressEvent"),
    "ReasoningSpec": ("mlxd.engine.types", "ReasoningSpec"),
    "release_freed_memory": ("mlxd.engine.memory", "release_freed_memory"),
    "request_constraint": ("mlxd.engine.constrain", "request_constraint"),
    "RopeOptions": ("mlxd.engine.loading.rope", "RopeOptions"),
    "run_on_own_thread": ("mlxd.engine.threads", "run_on_own_thread"),
    "sampling_defaults": ("mlxd.engine.sampling.defaults", "sampling_defaults"),
    "serve_group": ("mlxd.engine.distributed.serve", "serve_group"),
    "SamplingParams": ("mlxd.engine.sampling", "SamplingParams"),
    "ServedModel": ("mlxd.engine.served", "ServedModel"),
    "server_constraint": ("mlxd.engine.constrain", "server_constraint"),
    "ServerConstraint": ("mlxd.engine.constrain", "ServerConstraint"),
    "TemplateSpec": ("mlxd.engine.spec", "TemplateSpec"),
    "TEXT_ONLY": ("mlxd.engine.vlm", "TEXT_ONLY"),
    "THINK_CLOSE": ("mlxd.engine.chat", "THINK_CLOSE"),
    "THINK_OPEN": ("mlxd.engine.chat", "THINK_OPEN"),
    "Timings": ("mlxd.engine.types", "Timings"),
    "TokenEvent": ("mlxd.engine.types", "TokenEvent"),
    "TokenProb": ("mlxd.engine.types", "TokenProb"),
    "tool_call_format": ("mlxd.engine.chat", "tool_call_format"),
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> object:
    try:
        module, attribute = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module 'mlxd.engine' has no attribute {name!r}") from None
    value: object = getattr(importlib.import_module(module), attribute)
    globals()[name] = value  # later lookups skip this function
    return value
