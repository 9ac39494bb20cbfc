"""The store's request bodies (pydantic at the boundary): what the page sends and what an import file holds."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

ROLES = ("system", "user", "assistant", "tool")
ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"


class NewConversation(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str | None = Field(default=None, pattern=ID_PATTERN)
    title: str = Field(default="New chat", max_length=500)


class ConversationPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    title: str | None = Field(default=None, max_length=500)
    leaf: str | None = Field(default=None, pattern=ID_PATTERN)


class MessagePut(BaseModel):
    """One message; ``content``, ``reasoning``, ``tool_calls``, ``timings``, ``attachments``... travel as the page
    wrote them (shown as text, never as markup)."""
    model_config = ConfigDict(extra="allow")
    parent: str | None = Field(default=None, pattern=ID_PATTERN)
    role: str = Field(pattern="^(system|user|assistant|tool)$")
    leaf: bool = True

    def body(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class ImportedMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: str = Field(pattern=ID_PATTERN)
    parent: str | None = Field(default=None, pattern=ID_PATTERN)
    role: str = Field(pattern="^(system|user|assistant|tool)$")


class ImportedConversation(BaseModel):
    model_config = ConfigDict(extra="ignore")
    title: str = Field(default="Imported chat", max_length=500)
    leaf: str | None = Field(default=None, pattern=ID_PATTERN)
    created: float | None = None
    messages: list[ImportedMessage] = []


class ImportFile(BaseModel):
    """``GET /webui/export``'s shape: ``{"conversations": [...]}``."""
    model_config = ConfigDict(extra="ignore")
    conversations: list[ImportedConversation]
