"""One error tree for the whole project.

Third-party exceptions are translated into these at one boundary (``raise ... from exc``); each listener renders
them in its own envelope (b10621's on the public API, stable codes on the admin API).
"""

from __future__ import annotations

from dataclasses import dataclass, field


class MlxdError(Exception):
    """Root of every error mlxd raises on purpose."""


@dataclass(frozen=True)
class ConfigProblem:
    """One problem found while resolving configuration: which option, from where, and what is wrong."""

    option: str | None
    source: str | None
    message: str
    value: str | None = None

    def render(self) -> str:
        """One diagnostic line: ``SOURCE: OPTION=VALUE: MESSAGE``."""
        where = f"{self.source}: " if self.source else ""
        what = ""
        if self.option:
            what = self.option if self.value is None else f"{self.option}={self.value!r}"
            what += ": "
        return f"{where}{what}{self.message}"


@dataclass
class ConfigError(MlxdError):
    """A configuration that cannot be used; carries every problem found, not just the first."""

    problems: list[ConfigProblem] = field(default_factory=list)

    def __str__(self) -> str:
        return "\n".join(p.render() for p in self.problems)


class EngineError(MlxdError):
    """Inference failed: a model that cannot load, a request the engine cannot run."""


class AdminError(MlxdError):
    """An admin request that cannot be honoured."""

    def __init__(self, code: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status


class RequestError(MlxdError):
    """A request the public API refuses, answered in b10621's envelope with ``status`` and ``type``.

    ``extra`` holds additional top-level keys of the error object (``n_prompt_tokens``/``n_ctx`` for a context
    overflow).
    """

    status: int = 400
    type: str = "invalid_request_error"
    retry_after: int | None = None  # seconds, sent as ``Retry-After`` (a transient refusal a client should retry)

    def __init__(self, message: str, **extra: object) -> None:
        super().__init__(message)
        self.message = message
        self.extra = extra


class InvalidRequest(RequestError):
    """Malformed JSON, a missing field, a wrong type or value (llama-server's ``std::invalid_argument``): 400."""


class NotFound(RequestError):
    """A resource the request names does not exist: 404 ``not_found_error``."""

    status = 404
    type = "not_found_error"


class NotSupported(RequestError):
    """A feature this server (or its model, or its options) does not offer: 501 ``not_supported_error``."""

    status = 501
    type = "not_supported_error"


class NoModalityTower(RequestError):
    """An image or audio part for a model without that tower: b10621 answers it from its exception path, 500
    ``server_error``, and clients (llama.cpp's own tests among them) match on that."""

    status = 500
    type = "server_error"


class Unavailable(RequestError):
    """The server cannot take the request now (loading, no idle slot): 503 ``unavailable_error``."""

    status = 503
    type = "unavailable_error"


class QueueFull(Unavailable):
    """Every slot is busy and the wait queue is full."""


class ContextOverflow(RequestError):
    """The prompt does not fit the slot's context: 400 ``exceed_context_size_error`` with both sizes."""

    type = "exceed_context_size_error"

    def __init__(self, n_prompt_tokens: int, n_ctx: int, message: str | None = None) -> None:
        super().__init__(
            message or f"request ({n_prompt_tokens} tokens) exceeds the available context size ({n_ctx} tokens), "
            "try increasing it",
            n_prompt_tokens=n_prompt_tokens,
            n_ctx=n_ctx,
        )
        self.n_prompt_tokens = n_prompt_tokens
        self.n_ctx = n_ctx
