"""The errors of chat templating and output parsing."""

from __future__ import annotations

from mlxd.errors import EngineError, InvalidRequest


class ChatTemplateError(EngineError):
    """A chat template that cannot be loaded or rendered: bad syntax, ``raise_exception``, an unknown name.

    ``message`` is safe to show to a client; it carries the template's own words where it raised.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ChatRequestError(InvalidRequest):
    """Chat messages or options in a request that cannot be templated (llama-server answers these with a 400)."""
