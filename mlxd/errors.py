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


class ReconcileError(MlxdError):
    """A change that failed while being applied; the running state was kept."""

    def __init__(self, stage: str, message: str) -> None:
        super().__init__(f"{stage}: {message}")
        self.stage = stage
        self.message = message


class EngineError(MlxdError):
    """Inference failed: a model that cannot load, a request the engine cannot run."""


class AdminError(MlxdError):
    """An admin request that cannot be honoured."""

    def __init__(self, code: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status
