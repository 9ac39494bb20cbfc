"""Connection limits: the header and idle timeouts, --timeout as a per-read/write stall bound (never a deadline on
a whole response), the cap on open connections, and a log that a flood of connections cannot grow."""

from __future__ import annotations

import contextlib
import json
import resource
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Callable

import httpx
import pytest

from tests.e2e.conftest import RunningServer, launch


@contextlib.contextmanager
def under_a_low_hard_limit(checkpoint: Path, log_path: Path, *extra: str) -> Iterator[RunningServer]:
    """A daemon started under a hard descriptor limit of 1024 (a container's), listening and with its model."""
    import subprocess

    from tests.e2e.conftest import BIN, LISTENING
    from tests.e2e.admin_harness import wait_for

    def low_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))

    with open(log_path, "wb") as log_file:
        process = subprocess.Popen([str(BIN / "mlxd-server"), "-m", str(checkpoint), "--host", "127.0.0.1",
                                    "--port", "0", "--admin-listen", "off", *extra], stdout=log_file,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, preexec_fn=low_limit)
    running = RunningServer(process, log_path)
    try:
        match = wait_for(lambda: LISTENING.search(running.log()) or process.poll() is not None, 120,
                         "the daemon to listen")
        assert process.poll() is None, running.log()[-2000:]
        running.base_url = match.group(1)
        wait_for(lambda: "loaded in" in running.log(), 120, "the model")
        yield running
    finally:
        running.stop()


def test_a_daemon_under_a_low_hard_limit_serves(tiny_checkpoint: Path, tmp_path: Path) -> None:
    """mlx_lm's import-time setrlimit (2048, 4096) would fail under a hard limit of 1024: the daemon keeps the limit
    it was given and serves, however early some module imports mlx_lm."""
    with under_a_low_hard_limit(tiny_checkpoint, tmp_path / "mlxd.log") as running:
        assert "open files limit 1024" in running.log()
        with running.client() as client:
            assert client.post("/completion", json={"prompt": "Hi", "n_predict": 2}).status_code == 200


def address(running: RunningServer) -> tuple[str, int]:
    host, port = running.base_url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def read_all(sock: socket.socket, timeout: float = 30) -> bytes:
    """Everything the server sends until it closes the connection."""
    sock.settimeout(timeout)
    received = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(65536):
            received += chunk
    return received


@contextlib.contextmanager
def open_files(wanted: int) -> Iterator[None]:
    """This test process's soft descriptor limit raised to ``wanted`` (within the hard limit) for the block."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = min(hard, max(soft, wanted)) if hard != resource.RLIM_INFINITY else max(soft, wanted)
    if target < wanted:
        pytest.skip(f"the hard descriptor limit ({hard}) is below the {wanted} this test opens")
    resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.fixture(scope="module")
def impatient(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """A daemon with one-second header and idle timeouts."""
    running = launch(["-m", str(tiny_checkpoint), "--host", "127.0.0.1", "--port", "0", "--timeout-header", "1",
                      "--timeout-idle", "1"], tmp_path_factory.mktemp("impatient") / "mlxd.log")
    yield running
    running.stop()


def test_a_head_that_never_ends_is_answered_408(impatient: RunningServer) -> None:
    running = impatient
    with socket.create_connection(address(running)) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        received = read_all(sock)
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), received
    assert json.loads(body)["error"]["code"] == 408


def test_a_head_trickled_a_byte_at_a_time_still_meets_its_deadline(impatient: RunningServer) -> None:
    running = impatient
    with socket.create_connection(address(running)) as sock:
        sock.settimeout(30)
        head = b"GET /health HTTP/1.1\r\nX-Slow: " + b"a" * 200
        answer = b""
        for byte in head:  # one byte every 50 ms: each read is quick, the head as a whole is late
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                break
            with contextlib.suppress(TimeoutError, BlockingIOError):
                sock.settimeout(0.05)
                answer += sock.recv(65536)
                if answer:
                    break
        sock.settimeout(30)
        answer += read_all(sock)
    assert answer.startswith(b"HTTP/1.1 408"), answer


def test_an_idle_connection_is_closed(impatient: RunningServer) -> None:
    with socket.create_connection(address(impatient)) as sock:
        assert read_all(sock) == b""  # closed by the server without a word (nothing was asked)
    with socket.create_connection(address(impatient)) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        # The answer, then the close once the kept-alive connection has been idle past --timeout-idle.
        answer = read_all(sock)
    assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b'{"status":"ok"}'), answer


def test_timeout_does_not_cut_a_long_non_streamed_response(start_server: Callable[..., RunningServer]) -> None:
    # 7,000 tokens take several times --timeout on any CPU this suite runs on (tiny decodes about 2,000 tok/s
    # on one stream at best), so the answer outlives a deadline-style timeout.
    running = start_server("--timeout", "1", "-c", "8192", "--parallel", "1")
    with running.client(timeout=300) as client:
        response = client.post("/completion", json={"prompt": "Once", "n_predict": 7000, "ignore_eos": True})
        assert response.status_code == 200, response.text
        final = response.json()
        assert final["tokens_predicted"] == 7000
        # It ran for longer than --timeout: the answer was not a deadline cut.
        assert final["timings"]["predicted_ms"] > 1000, final["timings"]


@pytest.fixture(scope="module")
def capped(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """A daemon that keeps at most two connections, with timeouts long enough to hold them."""
    running = launch(["-m", str(tiny_checkpoint), "--host", "127.0.0.1", "--port", "0", "--connections-max", "2",
                      "--parallel", "2", "-c", "4096", "--timeout-idle", "120", "--timeout-header", "120"],
                     tmp_path_factory.mktemp("capped") / "mlxd.log")
    yield running
    running.stop()


def test_at_the_cap_a_new_connection_takes_an_idle_ones_place(capped: RunningServer) -> None:
    held = [socket.create_connection(address(capped)), socket.create_connection(address(capped))]
    held[-1].sendall(b"GET /health HTTP/1.1\r\n")  # one still sending its head
    try:
        for _ in range(3):
            assert httpx.get(capped.base_url + "/health", timeout=30).status_code == 200
    finally:
        for sock in held:
            sock.close()


def test_at_the_cap_with_every_connection_busy_a_new_one_is_refused(capped: RunningServer) -> None:
    body = {"prompt": "Once", "n_predict": 100000, "ignore_eos": True, "stream": True}
    with contextlib.ExitStack() as stack:
        readers = []  # held: a dropped line iterator closes its response
        for _ in range(2):
            client = stack.enter_context(httpx.Client(base_url=capped.base_url, timeout=60))
            response = stack.enter_context(client.stream("POST", "/completion", json=body))
            assert response.status_code == 200
            readers.append(response.iter_lines())
            next(readers[-1])
        refused = httpx.get(capped.base_url + "/health", timeout=30)
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"]["type"] == "unavailable_error"
        assert refused.headers["retry-after"] == "1"
    # The streams ended (their clients closed them): the next connection is served.
    from tests.e2e.admin_harness import wait_for

    wait_for(lambda: httpx.get(capped.base_url + "/health", timeout=30).status_code == 200, 60, "a free place")


@pytest.mark.parametrize(("connections", "cap"), [
    (300, 100),  # past the cap: each new connection takes the place of the longest idle one
    pytest.param(2000, None, marks=pytest.mark.soak),  # the figure, under the default cap
    pytest.param(2000, 500, marks=pytest.mark.soak),
])
def test_idle_connections_neither_starve_requests_nor_grow_the_log(
        start_server: Callable[..., RunningServer], connections: int, cap: int | None) -> None:
    args = ["--timeout-idle", "120", "--timeout-header", "120"] + (["--connections-max", str(cap)] if cap else [])
    running = start_server(*args)
    before = running.log_path.stat().st_size
    with open_files(connections + 600):
        held: list[socket.socket] = []
        try:
            for i in range(connections):
                sock = socket.create_connection(address(running))
                if i % 2:
                    sock.sendall(b"POST /completion HTTP/1.1\r\nContent-Le")  # half a head, never finished
                held.append(sock)
            for _ in range(3):
                with httpx.Client(base_url=running.base_url, timeout=30) as client:
                    assert client.get("/health").status_code == 200
                    answer = client.post("/completion", json={"prompt": "Hi", "n_predict": 4})
                    assert answer.status_code == 200, answer.text
        finally:
            for sock in held:
                sock.close()
    with running.client() as client:
        assert client.get("/health").status_code == 200
    assert running.log_path.stat().st_size - before < 1_000_000
    assert "Too many open files" not in running.log()


@pytest.mark.skipif(not Path("/proc/self/limits").exists(), reason="reads the daemon's limits from /proc")
def test_the_daemon_raises_its_descriptor_limit_and_keeps_it_past_the_model_load(capped: RunningServer) -> None:
    def open_files_limit(pid: int | str) -> tuple[int, int]:
        line = next(ln for ln in Path(f"/proc/{pid}/limits").read_text().splitlines() if ln.startswith("Max open"))
        soft, hard = line.split()[3:5]
        return int(soft), int(hard)

    _, own_hard = open_files_limit("self")
    # mlx_lm sets (2048, 4096) when imported; the daemon's hard limit stays what it was given, its soft one too.
    assert open_files_limit(capped.process.pid) == (own_hard, own_hard)
    assert f"open files limit {own_hard}" in capped.log()
