"""A model across processes (``--rpc`` with ``mlxd rpc-server``) on 127.0.0.1: greedy output equal to one process
for 8 concurrent requests (row and layer splits, 2 and 3 ranks, qwen3 and llama checkpoints), and supervision: a
killed peer, a peer missing at startup, a wrong token."""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Callable, Iterator

import httpx
import pytest

from tests.conftest import synthetic_checkpoint
from tests.e2e.admin_harness import admin, short_dir
from tests.e2e.conftest import BIN, RunningServer

PROMPTS = [f"Tell me about item {i}: the" for i in range(8)]
LISTENING = re.compile(rb"listening on [\d.]+:(\d+)")


class RpcServer:
    """One `mlxd rpc-server` process on 127.0.0.1."""

    def __init__(self, log_path: Path, port: int = 0, token_file: Path | None = None) -> None:
        args = [str(BIN / "mlxd"), "rpc-server", "-H", "127.0.0.1", "-p", str(port)]
        if token_file is not None:
            args += ["--rpc-token-file", str(token_file)]
        self.log_path = log_path
        self.tmpdir = log_path.with_suffix(".tmp")  # its ranks' temporary files
        self.tmpdir.mkdir()
        out = open(log_path, "ab")
        self.process = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                        start_new_session=True, env=dict(os.environ, TMPDIR=str(self.tmpdir)))
        out.close()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            match = LISTENING.search(log_path.read_bytes())
            if match and (port == 0 or int(match.group(1)) == port):
                self.port = int(match.group(1))
                return
            assert self.process.poll() is None, log_path.read_text()
            time.sleep(0.05)
        raise AssertionError(f"rpc-server did not listen:\n{log_path.read_text()}")

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def kill(self) -> None:
        """Kill the server and its rank at once, as a machine that loses power would."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)


@pytest.fixture
def rpc_servers(tmp_path: Path) -> Iterator[Callable[..., RpcServer]]:
    started: list[RpcServer] = []

    def start(port: int = 0, token_file: Path | None = None) -> RpcServer:
        server = RpcServer(tmp_path / f"rpc-{len(started)}.log", port, token_file)
        started.append(server)
        return server

    yield start
    for server in started:
        server.kill()


def _complete(base_url: str, prompt: str, n_predict: int = 12) -> list[int]:
    body = {"prompt": prompt, "n_predict": n_predict, "temperature": 0, "return_tokens": True, "cache_prompt": False}
    answer = httpx.post(f"{base_url}/completion", json=body, timeout=60)
    assert answer.status_code == 200, answer.text
    tokens = answer.json()["tokens"]
    assert len(tokens) == n_predict
    return [int(t) for t in tokens]


def _concurrent(base_url: str) -> list[list[int]]:
    with concurrent.futures.ThreadPoolExecutor(len(PROMPTS)) as pool:
        return list(pool.map(lambda p: _complete(base_url, p), PROMPTS))


@pytest.mark.parametrize("preset,passthrough,split,peers", [
    ("tiny", 0, "row", 1),  # qwen3, tensor parallel
    # llama, pipeline: `make test-distributed-long` (each case starts three daemons; make test keeps two)
    pytest.param("tiny-llama", 0, "layer", 1, marks=pytest.mark.distributed_long),
    ("tiny", 1, "layer", 2),  # qwen3 with a do-nothing third layer, one layer per rank over 3 ranks
])
def test_greedy_output_equals_one_process(preset: str, passthrough: int, split: str, peers: int,
                                          server: RunningServer, start_server: Callable[..., RunningServer],
                                          rpc_servers: Callable[..., RpcServer]) -> None:
    if preset == "tiny":  # the shared one-process server serves tiny; a do-nothing layer changes no output
        expected = _concurrent(server.base_url)
    else:
        alone = start_server("-m", str(synthetic_checkpoint(preset)))
        expected = _concurrent(alone.base_url)
        alone.stop()
    peer_servers = [rpc_servers() for _ in range(peers)]
    addresses = ",".join(peer.address for peer in peer_servers)
    model = str(synthetic_checkpoint(preset, passthrough=passthrough))
    group = start_server("-m", model, "-np", "8", "--rpc", addresses, "--split-mode", split)
    assert _concurrent(group.base_url) == expected
    assert f"{peers + 1} ranks, {split} split" in group.log()
    assert not [f for peer in peer_servers for f in peer.tmpdir.glob("mlxd-ring-*")]  # its host file, once read
    slots = httpx.get(f"{group.base_url}/slots", timeout=10).json()  # rank 0's slots, through the link
    assert len(slots) == 8 and sum(slot["n_ctx"] > 0 for slot in slots) == 8
    if split == "row":  # random seeds (drawn once, on rank 0) and a grammar (compiled on every rank) keep the ranks
        # in step: a rank that sampled or constrained otherwise would leave the group's collectives unmatched
        sampled = {"prompt": "Once", "n_predict": 16, "temperature": 1.0, "seed": -1, "cache_prompt": False}
        schema = {"prompt": "Answer:", "n_predict": 24, "temperature": 0,
                  "json_schema": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}
        with concurrent.futures.ThreadPoolExecutor(5) as pool:
            answers = list(pool.map(lambda body: httpx.post(f"{group.base_url}/completion", json=body, timeout=60),
                                    [sampled] * 4 + [schema]))
        assert [a.status_code for a in answers] == [200] * 5
        assert answers[-1].json()["content"].lstrip().startswith("{")
        assert httpx.get(f"{group.base_url}/health", timeout=10).status_code == 200


def _stream_until_error(base_url: str, started: list[float], ended: list[float], lines: list[str]) -> None:
    body = {"prompt": "Once upon a time", "n_predict": 100000, "temperature": 0, "stream": True}
    with httpx.stream("POST", f"{base_url}/completion", json=body, timeout=60) as response:
        for line in response.iter_lines():
            if line.startswith("data: "):
                started.append(time.monotonic())
                lines.append(line)
                if '"error"' in line:
                    break
    ended.append(time.monotonic())


def test_killed_peer_ends_streams_then_the_group_re_forms(start_server: Callable[..., RunningServer],
                                                          rpc_servers: Callable[..., RpcServer]) -> None:
    peer = rpc_servers()
    sock = short_dir() / "admin.sock"
    front = start_server("--rpc", peer.address, "--split-mode", "row", "--admin-listen", f"unix:{sock}")
    members = admin(sock).get("/v1/status").json()["peers"]
    assert [(m["rank"], m["state"]) for m in members] == [(0, "ready"), (1, "ready")]
    assert members[1]["address"] == peer.address and members[1]["shard"] == "rows 1/2 of every layer"
    assert members[1]["memory_bytes"] > 0 and members[1]["last_heartbeat"] is not None
    started: list[float] = []
    ended: list[float] = []
    lines: list[str] = []
    plain_body = {"prompt": "A long story", "n_predict": 100000, "temperature": 0}
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        streaming = pool.submit(_stream_until_error, front.base_url, started, ended, lines)
        plain = pool.submit(httpx.post, f"{front.base_url}/completion", json=plain_body, timeout=60)
        deadline = time.monotonic() + 30
        while len(started) < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert started, "the stream never began"
        peer.kill()
        killed = time.monotonic()
        streaming.result(timeout=10)
        answer = plain.result(timeout=10)
    assert ended[0] - killed < 5.0
    assert answer.status_code == 503 and peer.address in answer.json()["error"]["message"]  # b10621's envelope
    error = json.loads(lines[-1][len("data: "):])["error"]
    assert error["code"] == 503 and peer.address in error["message"]
    refused = httpx.post(f"{front.base_url}/completion", json={"prompt": "hi", "n_predict": 2}, timeout=10)
    assert refused.status_code == 503 and refused.headers.get("Retry-After")
    health = httpx.get(f"{front.base_url}/health", timeout=10)
    assert health.status_code == 503 and peer.address in health.json()["error"]["message"]
    status = admin(sock).get("/v1/status").json()
    assert peer.address in status["last_error"]["message"] and status["state"] == "serving"
    assert "ready" not in [m["state"] for m in status["peers"]]  # down, then lost or missing while it retries
    rpc_servers(port=peer.port)  # the machine comes back
    back = time.monotonic()
    while httpx.get(f"{front.base_url}/health", timeout=10).status_code != 200:
        assert time.monotonic() - back < 30, front.log()
        time.sleep(0.2)
    assert len(_complete(front.base_url, "hello", 4)) == 4
    assert "re-forming" in front.log() and front.process.poll() is None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_missing_peer_at_startup_then_wrong_token(tmp_path: Path, start_server: Callable[..., RunningServer],
                                                  rpc_servers: Callable[..., RpcServer]) -> None:
    port = _free_port()
    token = tmp_path / "token"
    token.write_text("right-token\n")
    front = start_server("--rpc", f"127.0.0.1:{port}", "--rpc-token-file", str(token), wait_ready=False)
    deadline = time.monotonic() + 60
    while "missing" not in (health := httpx.get(f"{front.base_url}/health", timeout=10)).text:  # loading first
        assert health.status_code == 503 and time.monotonic() < deadline, front.log()
        time.sleep(0.2)
    assert health.status_code == 503 and f"127.0.0.1:{port}" in health.text
    wrong = tmp_path / "wrong"
    wrong.write_text("another-token\n")
    rpc_servers(port=port, token_file=wrong)
    deadline = time.monotonic() + 15
    while "refused the front end" not in httpx.get(f"{front.base_url}/health", timeout=10).text:
        assert time.monotonic() < deadline, front.log()
        time.sleep(0.2)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:  # a client with the wrong token
        sock.sendall(b'{"op":"hello","token":"right-token"}\n')
        assert json.loads(sock.makefile().readline())["op"] == "refused"


def test_rpc_server_off_loopback_needs_a_token() -> None:
    done = subprocess.run([str(BIN / "mlxd"), "rpc-server", "-H", "0.0.0.0", "-p", "0"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and "--rpc-token-file" in done.stderr


def test_what_does_not_run_distributed_is_refused(tiny_checkpoint: Path) -> None:
    done = subprocess.run([str(BIN / "mlxd"), "config", "check", "--", "-m", str(tiny_checkpoint), "--rpc",
                           "127.0.0.1:50052", "--spec-type", "ngram-simple", "--cache-type-k", "q8_0"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "spec-type" in done.stderr and "cache-type-k" in done.stderr and "--rpc" in done.stderr


@pytest.mark.distributed_long
def test_a_silent_peer_is_lost_within_seconds(start_server: Callable[..., RunningServer],
                                              rpc_servers: Callable[..., RpcServer]) -> None:
    """A peer that stops answering without closing anything (a cut cable, a frozen machine): no heartbeat for 3 s."""
    peer = rpc_servers()
    front = start_server("--rpc", peer.address, "--split-mode", "layer")
    started: list[float] = []
    ended: list[float] = []
    lines: list[str] = []
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        streaming = pool.submit(_stream_until_error, front.base_url, started, ended, lines)
        deadline = time.monotonic() + 30
        while len(started) < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        os.killpg(peer.process.pid, signal.SIGSTOP)
        frozen = time.monotonic()
        try:
            streaming.result(timeout=15)
        finally:
            os.killpg(peer.process.pid, signal.SIGCONT)
    assert ended[0] - frozen < 5.0 and "silent" in lines[-1]
    back = time.monotonic()
    while httpx.get(f"{front.base_url}/health", timeout=10).status_code != 200:
        assert time.monotonic() - back < 30, front.log()
        time.sleep(0.2)
    assert len(_complete(front.base_url, "hello", 4)) == 4
