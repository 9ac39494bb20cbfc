"""Helpers for the admin listener's e2e tests: a short socket path, an httpx client over it, polling."""

from __future__ import annotations

import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import httpx

from tests.e2e.conftest import BIN


def short_dir() -> Path:
    """A fresh private directory with a short path (a Unix socket path must fit in 108 bytes)."""
    return Path(tempfile.mkdtemp(prefix="mlxd-t-"))


def admin(sock: Path, token: str | None = None) -> httpx.Client:
    """An httpx client for the admin socket ``sock``."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(transport=httpx.HTTPTransport(uds=str(sock)), base_url="http://mlxd", headers=headers,
                        timeout=60)


def wait_for(probe: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll ``probe`` until it returns something truthy; fail with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


def mlxd_admin(sock: Path, *args: str, token_file: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``mlxd admin --admin-listen unix:SOCK ARGS``."""
    argv = [str(BIN / "mlxd"), "admin", "--admin-listen", f"unix:{sock}"]
    if token_file is not None:
        argv += ["--admin-token-file", str(token_file)]
    return subprocess.run([*argv, *args], capture_output=True, text=True, timeout=120)
