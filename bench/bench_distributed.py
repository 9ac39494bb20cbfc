"""A model across processes on loopback (``--rpc`` with ``mlxd rpc-server``) beside one process: the per-token
overhead of each split mode, the time to detect a lost peer and the time to re-form the group.

    .venv/bin/python bench/bench_distributed.py CHECKPOINT [--tokens 64] [--repeat 3] [--out FILE.json]

Each configuration is its own mlxd-server on 127.0.0.1 (one rpc-server for the 2-rank groups); decode speed is one
greedy stream's tokens per second from the response's own timings, the median of ``--repeat`` runs. Loss: a
stream runs, the peer's rpc-server and rank are killed, and the clock stops when the stream's error event arrives;
re-form: the rpc-server restarts on its port and the clock stops when ``/health`` answers 200.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

BIN = Path(sys.executable).parent


def _start(args: list[str], log: Path, pattern: str = r"listening on (\S+)") -> tuple[subprocess.Popen[bytes], str]:
    out = open(log, "wb")
    proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    out.close()
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        match = re.search(pattern, log.read_text(errors="replace"))
        if match:
            return proc, match.group(1)
        if proc.poll() is not None:
            raise RuntimeError(log.read_text())
        time.sleep(0.05)
    raise RuntimeError(f"not listening: {log.read_text()}")


def _kill(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _healthy(url: str, timeout: float = 180) -> float:
    started = time.monotonic()
    while httpx.get(f"{url}/health", timeout=10).status_code != 200:
        if time.monotonic() - started > timeout:
            raise RuntimeError("never healthy")
        time.sleep(0.05)
    return time.monotonic() - started


def _decode_tps(url: str, tokens: int, repeat: int) -> float:
    speeds = []
    for i in range(repeat + 1):  # the first run warms the caches and is not counted
        body = {"prompt": f"Run {i}: once upon a time", "n_predict": tokens, "temperature": 0, "cache_prompt": False}
        timings = httpx.post(f"{url}/completion", json=body, timeout=300).json()["timings"]
        if i:
            speeds.append(float(timings["predicted_per_second"]))
    return statistics.median(speeds)


def _rpc_server(work: Path, port: int = 0) -> tuple[subprocess.Popen[bytes], int]:
    proc, bound = _start([str(BIN / "mlxd"), "rpc-server", "-H", "127.0.0.1", "-p", str(port)],
                         work / f"rpc-{port}-{time.monotonic_ns()}.log", r"listening on [\d.]+:(\d+)")
    return proc, int(bound)


def _loss_and_reform(url: str, peer: subprocess.Popen[bytes], port: int, work: Path) -> tuple[float, float]:
    body = {"prompt": "Once upon a time", "n_predict": 100000, "temperature": 0, "stream": True}
    with httpx.stream("POST", f"{url}/completion", json=body, timeout=120) as response:
        lines = response.iter_lines()
        for _ in range(6):
            next(lines)
        _kill(peer)
        killed = time.monotonic()
        for line in lines:
            if '"error"' in line:
                break
        detected = time.monotonic() - killed
    back, _ = _rpc_server(work, port)
    reform = _healthy(url)
    _kill(back)
    return detected, reform


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("checkpoint")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="mlxd-bench-dist-"))
    results: dict[str, object] = {"checkpoint": args.checkpoint, "tokens": args.tokens}
    for label, split in (("one process", None), ("2 ranks, row", "row"), ("2 ranks, layer", "layer")):
        peer = None
        argv = [str(BIN / "mlxd-server"), "-m", args.checkpoint, "--host", "127.0.0.1", "--port", "0"]
        if split is not None:
            peer, port = _rpc_server(work)
            argv += ["--rpc", f"127.0.0.1:{port}", "--split-mode", split]
        server, url = _start(argv, work / f"{label.replace(' ', '-').replace(',', '')}.log")
        try:
            _healthy(url)
            tps = _decode_tps(url, args.tokens, args.repeat)
            entry: dict[str, float] = {"decode_tok_s": round(tps, 1), "ms_per_token": round(1000 / tps, 2)}
            if peer is not None:
                detected, reform = _loss_and_reform(url, peer, port, work)
                entry.update(loss_detected_s=round(detected, 3), reformed_s=round(reform, 2))
            results[label] = entry
            print(label, entry, flush=True)
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(60)
            if peer is not None:
                _kill(peer)
    base = results["one process"]
    assert isinstance(base, dict)
    for label in ("2 ranks, row", "2 ranks, layer"):
        entry = results[label]
        assert isinstance(entry, dict)
        entry["overhead_ms_per_token"] = round(entry["ms_per_token"] - base["ms_per_token"], 2)
    print(json.dumps(results, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
