"""SIGTERM ends the daemon with exit status 0 whatever it is doing: generating, or draining a replaced model.

Every thread that did MLX work must have released its streams before the interpreter exits, or the process
aborts (-6) at exit; these runs log verbosely to a file, as the run that first showed the abort did.
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Callable

import httpx

from tests.e2e.admin_harness import wait_for
from tests.e2e.conftest import RunningServer


class Generation(threading.Thread):
    """A long streamed /completion; ``started`` is set at its first token."""

    def __init__(self, base_url: str) -> None:
        super().__init__(daemon=True)
        self.base_url = base_url
        self.started = threading.Event()
        self.chunks = 0

    def run(self) -> None:
        body = {"prompt": "Once upon a time", "n_predict": 100000, "stream": True}
        try:
            with httpx.Client(base_url=self.base_url, timeout=60) as client:
                with client.stream("POST", "/completion", json=body) as response:
                    for line in response.iter_lines():
                        if line.startswith("data: "):
                            self.chunks += 1
                            self.started.set()
        except httpx.TransportError:  # the daemon closed the connection on its way out
            pass


def generating(running: RunningServer, n: int = 1) -> list[Generation]:
    """``n`` generations in flight on the daemon (each has produced a token)."""
    started = [Generation(running.base_url) for _ in range(n)]
    for generation in started:
        generation.start()
    for generation in started:
        assert generation.started.wait(60), running.log()
    return started


def test_sigterm_mid_generation_exits_zero(start_server: Callable[..., RunningServer], tmp_path: Path) -> None:
    log_file = tmp_path / "mlxd-verbose.log"
    running = start_server("--log-verbosity", "4", "--log-file", str(log_file), "--shutdown-timeout", "1")
    in_flight = generating(running, 2)

    assert running.stop(signal.SIGTERM) == 0, log_file.read_text()
    for generation in in_flight:
        generation.join(30)
        assert not generation.is_alive() and generation.chunks > 0
    assert "stopped" in log_file.read_text()


def test_sigterm_while_a_replaced_model_drains_exits_zero(start_server: Callable[..., RunningServer],
                                                          tiny_checkpoint: Path, tmp_path: Path) -> None:
    toml, log_file = tmp_path / "mlxd.toml", tmp_path / "mlxd-verbose.log"
    toml.write_text(f'model = "{tiny_checkpoint}"\nctx-size = 512\n')
    running = start_server("--config", str(toml), "--no-watch-config", "--log-verbosity", "4", "--log-file",
                           str(log_file), "--shutdown-timeout", "1", model=False)
    on_old = generating(running)
    toml.write_text(f'model = "{tiny_checkpoint}"\nctx-size = 1024\n')  # a model option: a new worker replaces it
    running.send_signal(signal.SIGHUP)
    wait_for(lambda: "committed generation 2" in log_file.read_text(), 60, "the swap")
    on_new = generating(running)

    assert running.stop(signal.SIGTERM) == 0, log_file.read_text()
    for generation in on_old + on_new:
        generation.join(30)
        assert not generation.is_alive()
    lines = log_file.read_text()
    # The replaced worker was freed before the process ended, not abandoned to the interpreter's exit.
    assert lines.index("draining (") < lines.index("unloaded") < lines.rindex("stopped")
