"""What the HTTP benchmarks share: server processes (start, readiness, peak memory, stop), prompts, percentiles."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from tokenizers import Tokenizer

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
TEXT = "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n"
LISTENING = re.compile(r"listening on (http://\S+)")


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank ``q`` quantile (0..1) of ``values``."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


class Prompts:
    """Prompt texts of a given length in the checkpoint's own tokens, with a salt line so that none share a prefix."""

    def __init__(self, checkpoint: Path) -> None:
        self.tokenizer = Tokenizer.from_file(str(checkpoint / "tokenizer.json"))

    def text(self, n_tokens: int, salt: int | str = 0) -> str:
        ids = self.tokenizer.encode(f"# {salt}\n" + TEXT * (2 + n_tokens // 16), add_special_tokens=False).ids
        return self.tokenizer.decode(ids[:n_tokens], skip_special_tokens=False)

    def count(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)


def free_port() -> int:
    """A loopback port free right now (for servers that cannot listen on port 0 and report it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def peak_rss_mib(pid: int) -> float:
    """The process's peak resident set (VmHWM) in MiB, 0 when it cannot be read."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


# Between two turns: long enough for the last process's BLAS threads to stop spinning and go to sleep, so that a
# turn does not pay for the one before it.
PAUSE_S = 0.3


class ScriptProcess:
    """A Python script in a long-lived process of its own that prints ``ready`` once loaded, then answers each line
    written to it with one line."""

    def __init__(self, script: str, *args: str, what: str = "the script") -> None:
        self.process = subprocess.Popen([sys.executable, "-c", script, *args],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        if self._line() != "ready":
            raise RuntimeError(f"{what} did not start")

    def _line(self) -> str:
        assert self.process.stdout is not None
        return self.process.stdout.readline().strip()

    def ask(self, line: str) -> str:
        """Send one line and return the answer."""
        assert self.process.stdin is not None
        self.process.stdin.write(f"{line}\n")
        self.process.stdin.flush()
        return self._line()

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(30)


@dataclass
class Server:
    """A server process started for a benchmark: its base URL, log and process."""

    name: str
    argv: list[str]
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)
    base_url: str = ""
    process: subprocess.Popen | None = None

    def start(self, timeout: float = 300) -> None:
        """Start the process and wait until its ``/health`` answers 200 (the model is loaded)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("LLAMA_ARG_", "MLXD_"))}
        env.update(self.env)
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                                            stdin=subprocess.DEVNULL, cwd=ROOT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.process.returncode}:\n{self.log()[-3000:]}")
            if not self.base_url:
                match = LISTENING.search(self.log())
                self.base_url = match.group(1) if match else ""
            if self.base_url:
                try:
                    if httpx.get(f"{self.base_url}/health", timeout=2).status_code == 200:
                        return
                except httpx.TransportError:
                    pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"{self.name} was not ready within {timeout} s:\n{self.log()[-3000:]}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def peak_rss_mib(self) -> float:
        return peak_rss_mib(self.process.pid) if self.process else 0.0

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 30 s; always reaps the process."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)

    def __enter__(self) -> Server:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()
