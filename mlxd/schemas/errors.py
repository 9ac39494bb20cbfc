"""b10621's error bodies: the envelope every refusal uses, and the bare 403 of disabled features."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

# The eight error types of b10621's envelope and the HTTP status each one carries.
ERROR_TYPES: dict[str, int] = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "not_found_error": 404,
    "server_error": 500,
    "permission_error": 403,
    "not_supported_error": 501,
    "unavailable_error": 503,
    "exceed_context_size_error": 400,
}


class ErrorObject(BaseModel):
    """The inside of the envelope; extra keys (``n_prompt_tokens``, ``n_ctx``) ride beside the three fixed ones."""

    model_config = ConfigDict(extra="allow")

    code: int
    message: str
    type: str


class ErrorEnvelope(BaseModel):
    """``{"error": {"code", "message", "type"}}``; the HTTP status equals ``error.code``."""

    error: ErrorObject


class FeatureDisabledObject(BaseModel):
    message: str = "this feature is disabled"
    type: str = "feature_disabled"


class FeatureDisabled(BaseModel):
    """The 403 body of /tools and /cors-proxy when their feature is off: no ``code`` key (as b10621 sends it)."""

    error: FeatureDisabledObject = FeatureDisabledObject()
