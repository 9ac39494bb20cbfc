"""The log under a flood: repeated warnings fold, and with -v tracebacks are redacted like every other line."""

from __future__ import annotations

import io
import logging

from mlxd.daemon import logs


def _capture(settings: logs.LogSettings) -> tuple[io.StringIO, logging.Logger]:
    logs.configure_logging(settings)
    stream = io.StringIO()
    for handler in logs._handlers:
        handler.setStream(stream)  # type: ignore[attr-defined]
    return stream, logging.getLogger("mlxd.test")


def test_repeated_warnings_fold_and_say_how_many_were_dropped() -> None:
    folding = logs.RepeatFilter(burst=3, window=0.2)
    record = lambda port: logging.LogRecord("mlxd.x", logging.ERROR, __file__, 1, "accept failed on %d", (port,), None)
    kept = [folding.filter(record(port)) for port in range(10)]
    assert kept == [True] * 3 + [False] * 7  # alike: they differ only in a number
    import time

    time.sleep(0.25)
    late = record(99)
    assert folding.filter(late) and "(7 similar line(s) suppressed)" in late.getMessage()
    info = logging.LogRecord("mlxd.x", logging.INFO, __file__, 1, "GET /health -> 200", None, None)
    assert all(folding.filter(info) for _ in range(20))  # per-request lines are never folded


def test_library_errors_reach_the_daemons_handlers_folded() -> None:
    stream, _ = _capture(logs.LogSettings())
    try:
        for _ in range(200):
            logging.getLogger("asyncio").error("socket.accept() out of system resource: [Errno 24] Too many open files")
        assert 1 <= stream.getvalue().count("Too many open files") <= 10
    finally:
        logs.configure_logging(logs.LogSettings())


def test_tracebacks_are_redacted_with_verbose_logging() -> None:
    secret = "sk-canary-0123456789"
    stream, log = _capture(logs.LogSettings(log_verbose=True, secrets=(secret,)))
    try:
        try:
            raise RuntimeError(f"failed with key {secret}")
        except RuntimeError:
            log.exception("request failed")
        text = stream.getvalue()
        assert "Traceback" in text and "RuntimeError: failed with key ***" in text
        assert secret not in text
    finally:
        logs.configure_logging(logs.LogSettings())
