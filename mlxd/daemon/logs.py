"""Logging: one configured ``mlxd`` logger tree, llama-server's log options, and secrets redacted from every line.

``configure_logging`` is idempotent and cheap, so a live change (admin API, file edit) takes effect on the next line.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import stat
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Iterable, TextIO

from mlxd.errors import ConfigError, ConfigProblem

ROOT = "mlxd"
# Libraries that log on the daemon's behalf (a failed accept(), a connection error): their lines go through the
# same handlers, with the same redaction and repeat folding, instead of Python's bare last-resort handler.
LIBRARY_LOGGERS = ("asyncio", "sanic")
REDACTED = "***"

# llama.cpp's verbosity levels (common/log.h): 0 output, 1 error, 2 warning, 3 info, 4+ debug. mlxd adds 5+ for a
# line per generated token (mlxd.api.request_log.TOKEN_LEVEL); -v and 4 give a line per request.
TRACE = 5
_VERBOSITY_TO_LEVEL = {0: logging.CRITICAL, 1: logging.ERROR, 2: logging.WARNING, 3: logging.INFO}


@dataclass(frozen=True)
class LogSettings:
    """The log options as llama-server spells them."""

    log_disable: bool = False
    log_file: str | None = None
    log_verbosity: int = 3
    log_verbose: bool = False
    log_colors: str = "auto"
    log_prefix: bool = False
    log_timestamps: bool = False
    secrets: tuple[str, ...] = field(default=(), repr=False)

    @property
    def level(self) -> int:
        if self.log_verbosity >= 5:
            return TRACE
        if self.log_verbose or self.log_verbosity >= 4:
            return logging.DEBUG
        return _VERBOSITY_TO_LEVEL.get(max(self.log_verbosity, 0), logging.INFO)


class RedactingFilter(logging.Filter):
    """Replaces every known secret in a record's rendered message; secrets can change at runtime."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._secrets: tuple[str, ...] = ()

    def set_secrets(self, secrets: Iterable[str]) -> None:
        # Longest first, so a secret that contains another is redacted whole.
        cleaned = sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True)
        with self._lock:
            self._secrets = tuple(cleaned)

    def redact(self, text: str) -> str:
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        if self._secrets:
            message = self.redact(record.getMessage())
            record.msg, record.args = message, None
        return True


_redactor = RedactingFilter()


class RepeatFilter(logging.Filter):
    """Folds repeated warnings and errors: past ``burst`` lines alike within ``window`` seconds, a line is dropped,
    and the next one let through after the window says how many were. Lines are alike when they differ only in
    their numbers (ports, counts, ids), so a flood of one failure (a client dropping connections, a refused accept)
    cannot fill a disk."""

    def __init__(self, burst: int = 10, window: float = 10.0, max_keys: int = 4096) -> None:
        super().__init__()
        self.burst, self.window, self.max_keys = burst, window, max_keys
        self._lock = threading.Lock()
        self._seen: dict[tuple[str, int, str], list[float]] = {}  # key -> [window start, count, suppressed]

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:  # per-request and lifecycle lines are the log's purpose
            return True
        try:
            text = record.getMessage()
        except Exception:  # a malformed call: let logging report it as it would
            return True
        key = (record.name, record.levelno, _DIGITS.sub("#", text)[:300])
        now = time.monotonic()
        with self._lock:
            entry = self._seen.get(key)
            if entry is None or now - entry[0] > self.window:
                suppressed = int(entry[2]) if entry is not None else 0
                if len(self._seen) >= self.max_keys:
                    self._seen.clear()
                self._seen[key] = [now, 1, 0]
                if suppressed:
                    record.msg, record.args = f"{text} ({suppressed} similar line(s) suppressed)", None
                return True
            entry[1] += 1
            if entry[1] <= self.burst:
                return True
            entry[2] += 1
            return False


_DIGITS = re.compile(r"\d+")
_repeats = RepeatFilter()


def redact(text: str) -> str:
    """Redact the configured secrets from any text that is about to leave the process."""
    return _redactor.redact(text)


class _Formatter(logging.Formatter):
    _COLORS = {logging.DEBUG: "\033[90m", logging.WARNING: "\033[33m", logging.ERROR: "\033[31m",
               logging.CRITICAL: "\033[31;1m"}
    _LETTERS = {TRACE: "T", logging.DEBUG: "D", logging.INFO: "I", logging.WARNING: "W", logging.ERROR: "E",
                logging.CRITICAL: "E"}

    def __init__(self, settings: LogSettings, colors: bool) -> None:
        super().__init__()
        self.settings = settings
        self.colors = colors

    def format(self, record: logging.LogRecord) -> str:
        text = record.getMessage()
        if record.exc_info and self.settings.log_verbose:
            text += "\n" + self.formatException(record.exc_info)
        prefix = ""
        if self.settings.log_timestamps:
            prefix += self.formatTime(record, "%Y-%m-%d %H:%M:%S") + f".{int(record.msecs):03d} "
        if self.settings.log_prefix:
            prefix += f"{self._LETTERS.get(record.levelno, 'I')} "
        # Redacted here, after the traceback is appended (the filter only sees the message).
        line = redact(f"{prefix}{record.name}: {text}")
        color = self._COLORS.get(record.levelno) if self.colors else None
        return f"{color}{line}\033[0m" if color else line


def check_log_file(path: str) -> None:
    """What opening --log-file would refuse, found without creating it (the daemon's preflight)."""
    _refuse_link_or_dir(path)
    exists = os.path.lexists(path)
    target = path if exists else (os.path.dirname(path) or ".")
    if not os.access(target, os.W_OK if exists else os.W_OK | os.X_OK):
        reason = errno.EACCES if exists or os.path.isdir(target) else errno.ENOENT
        raise ConfigError([ConfigProblem("log-file", None, f"cannot open: {os.strerror(reason)}", path)])


def _refuse_link_or_dir(path: str) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode) or stat.S_ISDIR(st.st_mode):
        kind = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "a directory"
        raise ConfigError([ConfigProblem("log-file", None, f"refusing to log to {kind}", path)])


def _open_log_file(path: str) -> logging.Handler:
    """Open --log-file for appending: created 0600, symlinks and directories refused."""
    _refuse_link_or_dir(path)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        raise ConfigError([ConfigProblem("log-file", None, f"cannot open: {exc.strerror}", path)]) from exc
    return logging.StreamHandler(os.fdopen(fd, "a", encoding="utf-8", buffering=1))


class _Stderr(logging.StreamHandler[TextIO]):
    """The console: whatever ``sys.stderr`` is when a line is written (unless ``setStream`` gave it another
    stream). A handler that kept the stream it was made with would write to it after it closed, where something
    replaced ``sys.stderr`` for a while (a test's capture), and each line would then be a logging error."""

    _other: TextIO | None = None

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> TextIO:
        return sys.stderr if self._other is None else self._other

    @stream.setter
    def stream(self, value: TextIO) -> None:
        self._other = None if value is sys.stderr else value


_handlers: list[logging.Handler] = []


def configure_logging(settings: LogSettings) -> None:
    """(Re)configure the ``mlxd`` logger tree; raises ConfigError (and changes nothing) for a bad log file."""
    new_handlers: list[logging.Handler] = []
    if not settings.log_disable:
        if settings.log_file:
            new_handlers.append(_open_log_file(settings.log_file))
        else:
            colors = settings.log_colors == "on" or (settings.log_colors == "auto" and sys.stderr.isatty())
            console = _Stderr()
            console.setFormatter(_Formatter(settings, colors))
            new_handlers.append(console)
    for handler in new_handlers:
        if handler.formatter is None:
            handler.setFormatter(_Formatter(settings, colors=False))
        handler.addFilter(_repeats)
        handler.addFilter(_redactor)
    _redactor.set_secrets(settings.secrets)

    loggers = [logging.getLogger(name) for name in (ROOT, *LIBRARY_LOGGERS)]
    for old in _handlers:
        for logger in loggers:
            logger.removeHandler(old)
        if not (isinstance(old, logging.StreamHandler) and old.stream in (sys.stderr, sys.stdout)):
            old.close()
    _handlers[:] = new_handlers
    for logger in loggers:
        for handler in new_handlers:
            logger.addHandler(handler)
        logger.propagate = False
        if settings.log_disable:
            logger.addHandler(logging.NullHandler())
    loggers[0].setLevel(settings.level)
