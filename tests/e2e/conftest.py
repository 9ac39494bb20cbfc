"""Real daemon processes on 127.0.0.1 (port 0), driven over HTTP.

``server`` is one shared ``mlxd-server`` serving the tiny synthetic checkpoint for the whole session; tests that
need their own flags, files or signals start one with ``start_server``.
"""

from __future__ import annotations

import os
import re
import signal as signals
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import httpx
import pytest

BIN = Path(sys.executable).parent
LISTENING = re.compile(r"listening on (\S+)")
# Under pytest-xdist (`make test`), one per worker (PYTEST_XDIST_WORKER: gw0, gw1, ...), so that daemons of
# concurrent workers never share a conversation store.
STATE_HOME = Path(__file__).resolve().parent.parent.parent / ".cache" / "test-state" / os.environ.get(
    "PYTEST_XDIST_WORKER", "")


@dataclass
class RunningServer:
    """A started daemon: its process, base URL and log."""

    process: subprocess.Popen
    log_path: Path
    base_url: str = ""
    argv: list[str] = field(default_factory=list)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def client(self, **kwargs) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, timeout=kwargs.pop("timeout", 60), **kwargs)

    def send_signal(self, sig: int) -> None:
        self.process.send_signal(sig)

    def stop(self, sig: int = signals.SIGTERM, timeout: float = 60) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        return self.process.returncode


def launch(args: list[str], log_path: Path, *, env: dict[str, str] | None = None, program: str = "mlxd-server",
           wait_ready: bool = True, timeout: float = 120) -> RunningServer:
    """Start ``program ARGS`` and wait until it is listening (and, with wait_ready, until /health answers 200)."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("LLAMA_ARG_", "MLXD_"))}
    # The chat page's conversation store (mlxd.web) defaults to $XDG_STATE_HOME/mlxd: keep test daemons' out of home.
    full_env["XDG_STATE_HOME"] = str(STATE_HOME)
    full_env.update(env or {})
    argv = [str(BIN / program), *args]
    log_file = open(log_path, "wb")
    process = subprocess.Popen(argv, stdout=log_file, stderr=subprocess.STDOUT, env=full_env,
                               stdin=subprocess.DEVNULL)
    log_file.close()
    running = RunningServer(process, log_path, argv=argv)
    # With --log-file the daemon's lines go there, not to stdout.
    log_file = Path(args[args.index("--log-file") + 1]) if "--log-file" in args else None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{program} exited with {process.returncode}:\n{running.log()}")
        lines = running.log() + (log_file.read_text(errors="replace") if log_file and log_file.exists() else "")
        match = LISTENING.search(lines)
        if match:
            running.base_url = match.group(1)
            break
        time.sleep(0.05)
    else:
        running.stop(signals.SIGKILL)
        raise RuntimeError(f"{program} did not start listening within {timeout} s:\n{running.log()}")
    if wait_ready:
        with httpx.Client(base_url=running.base_url, timeout=5) as client:
            while time.monotonic() < deadline:
                if process.poll() is not None:
                    raise RuntimeError(f"{program} exited with {process.returncode}:\n{running.log()}")
                try:
                    if client.get("/health").status_code == 200:
                        return running
                except httpx.TransportError:
                    pass
                time.sleep(0.05)
        running.stop(signals.SIGKILL)
        raise RuntimeError(f"{program} was not ready within {timeout} s:\n{running.log()}")
    return running


@pytest.fixture(scope="session")
def server(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """One shared mlxd-server with the tiny checkpoint, default options, on 127.0.0.1 and a free port."""
    log_path = tmp_path_factory.mktemp("server") / "mlxd.log"
    running = launch(["-m", str(tiny_checkpoint), "--host", "127.0.0.1", "--port", "0"], log_path)
    yield running
    running.stop()


@pytest.fixture
def start_server(tiny_checkpoint: Path, tmp_path: Path) -> Iterator[Callable[..., RunningServer]]:
    """Factory: ``start_server(*args, env=..., model=True)`` starts a dedicated daemon, stopped after the test."""
    started: list[RunningServer] = []

    def start(*args: str, env: dict[str, str] | None = None, model: bool = True, wait_ready: bool = True,
              program: str = "mlxd-server", timeout: float = 120) -> RunningServer:
        argv = list(args)
        if model and "-m" not in argv and "--model" not in argv:
            argv = ["-m", str(tiny_checkpoint), *argv]
        if "--host" not in argv:
            argv += ["--host", "127.0.0.1"]
        if "--port" not in argv:
            argv += ["--port", "0"]
        running = launch(argv, tmp_path / f"mlxd-{len(started)}.log", env=env, program=program,
                         wait_ready=wait_ready, timeout=timeout)
        started.append(running)
        return running

    yield start
    for running in started:
        running.stop(timeout=30)
