"""The console log handler writes to the ``sys.stderr`` of the moment it writes."""

from __future__ import annotations

import io
import logging

import pytest

from mlxd.daemon.logs import LogSettings, configure_logging


def test_a_replaced_and_closed_stderr_is_not_written_to(monkeypatch: pytest.MonkeyPatch) -> None:
    """Configured while ``sys.stderr`` was a stream that has since closed (a test's capture), the next line goes to
    the stream that replaced it, without a logging error."""
    first, second = io.StringIO(), io.StringIO()
    log = logging.getLogger("mlxd.console-test")
    try:
        monkeypatch.setattr("sys.stderr", first)
        configure_logging(LogSettings())
        log.warning("to the first")
        first_text = first.getvalue()
        first.close()
        monkeypatch.setattr("sys.stderr", second)
        log.warning("to the second")
    finally:
        monkeypatch.undo()
        configure_logging(LogSettings())
    assert first_text == "mlxd.console-test: to the first\n"
    assert second.getvalue() == "mlxd.console-test: to the second\n"
