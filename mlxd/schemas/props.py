"""``GET /props`` and ``POST /props`` bodies."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class Modalities(BaseModel):
    vision: bool = False
    video: bool = False
    audio: bool = False


class ChatTemplateCaps(BaseModel):
    supports_object_arguments: bool = False
    supports_parallel_tool_calls: bool = False
    supports_preserve_reasoning: bool = False
    supports_reasoning_effort: bool = False
    supports_string_content: bool = True
    supports_system_role: bool = True
    supports_tool_calls: bool = False
    supports_tools: bool = False
    supports_typed_content: bool = False


class DefaultGenerationSettings(BaseModel):
    params: dict[str, Any]
    n_ctx: int


class Props(BaseModel):
    """Single-model ``/props``; ``chat_template_tool_use`` only when the template has a tool-use variant."""

    model_config = ConfigDict(extra="allow")

    default_generation_settings: DefaultGenerationSettings
    total_slots: int
    model_alias: str
    model_ftype: str
    model_path: str
    modalities: Modalities = Modalities()
    media_marker: str
    endpoint_slots: bool
    endpoint_props: bool
    endpoint_metrics: bool
    ui: bool = False
    ui_settings: dict[str, Any] = {}
    chat_template: str
    chat_template_caps: ChatTemplateCaps
    bos_token: str
    eos_token: str
    build_info: str
    is_sleeping: bool = False
    cors_proxy_enabled: bool = False


class PropsUpdate(BaseModel):
    """``POST /props``: b10621 changes no global property at run time, so only an empty object is honest."""

    model_config = ConfigDict(extra="forbid")


class Success(BaseModel):
    success: bool = True
