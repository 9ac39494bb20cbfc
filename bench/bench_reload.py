"""Change latency under load: a real daemon with a TOML config and an admin socket, 8 streams running throughout.

    .venv/bin/python bench/bench_reload.py CHECKPOINT [--streams 8] [--tokens 32] [--settle 2] [--out FILE.json]

The daemon serves ``model`` from a TOML file (``--config``, ``--watch-config``) with a synthetic LoRA adapter
(``--lora``) and ``--admin-listen unix:PATH``. While ``--streams`` clients send streamed greedy completions back to
back, one change at a time is triggered and timed from the trigger to the daemon's ``committed`` event (the
event's own timestamp, read from ``GET /v1/events``):

- sampling: ``PATCH /v1/config {"top-k": ...}`` on the admin API;
- logging: ``PUT /v1/logging {"log-prefix": true}`` on the admin API;
- LoRA scale: ``POST /lora-adapters`` on the public port;
- model swap (file): ``model`` in the TOML rewritten to a second copy of the checkpoint, picked up by the watcher;
- model swap (API): ``POST /v1/models {"action": "load"}`` on the admin API, to a third copy.

For each change: the trigger's own answer time, trigger to ``committed``, the requests that overlapped the change
(started before its commit, ended after its trigger) and how many of them failed or were cut short (the target is
zero). Writes a JSON document and prints a markdown table. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.client import StreamResult, async_client, complete, eos_bias, stream_completion  # noqa: E402
from bench.common import BIN, Prompts, Server  # noqa: E402


@dataclass
class Done:
    """A request of the load, with wall-clock start and end."""

    start: float
    end: float
    ok: bool
    result: StreamResult


class Load:
    """``streams`` clients sending streamed completions back to back until stopped."""

    def __init__(self, base_url: str, streams: int, tokens: int, prompts: Prompts, bias: dict[str, float]) -> None:
        self.base_url, self.streams, self.tokens = base_url, streams, tokens
        self.prompts, self.bias = prompts, bias
        self.done: list[Done] = []
        self.stop = asyncio.Event()

    async def run(self) -> None:
        async with async_client(self.base_url, self.streams) as client:
            await asyncio.gather(*(self._stream(client, i) for i in range(self.streams)))

    async def _stream(self, client: httpx.AsyncClient, i: int) -> None:
        n = 0
        while not self.stop.is_set():
            start = time.time()
            result = await stream_completion(client, self.prompts.text(16, f"load-{i}-{n}"), self.tokens, self.bias)
            self.done.append(Done(start, time.time(), complete(result, self.tokens), result))
            n += 1

    def overlapping(self, t0: float, t1: float) -> list[Done]:
        return [d for d in self.done if d.start <= t1 and d.end >= t0]


class Events:
    """The admin API's event stream, collected as it arrives."""

    def __init__(self, admin: httpx.AsyncClient) -> None:
        self.admin = admin
        self.seen: list[dict[str, Any]] = []
        self.connected = asyncio.Event()
        self.arrived = asyncio.Event()

    async def follow(self) -> None:
        async with self.admin.stream("GET", "/v1/events", timeout=httpx.Timeout(None)) as response:
            async for line in response.aiter_lines():
                if line.startswith(": connected"):
                    self.connected.set()
                elif line.startswith("data: "):
                    self.seen.append(json.loads(line[6:]))
                    self.arrived.set()

    async def committed(self, after: int, key: str, timeout: float = 300) -> dict[str, Any]:
        """The first ``committed`` event after index ``after`` whose ``changed`` names ``key``."""
        deadline = time.monotonic() + timeout
        while True:
            for event in self.seen[after:]:
                if event["type"] == "committed" and key in event.get("changed", []):
                    return event
                if event["type"] == "refused":
                    raise RuntimeError(f"change refused: {event}")
            self.arrived.clear()
            await asyncio.wait_for(self.arrived.wait(), max(0.1, deadline - time.monotonic()))


async def expect_ok(call: Awaitable[httpx.Response]) -> None:
    response = await call
    if response.status_code != 200:
        raise RuntimeError(f"HTTP {response.status_code}: {response.text[:300]}")


async def run(args: argparse.Namespace, home: Path, server: Server, config: Path, copies: list[Path],
              prompts: Prompts, bias: dict[str, float]) -> list[dict[str, Any]]:
    admin = httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=str(home / "admin.sock")),
                              base_url="http://mlxd", timeout=300)
    public = httpx.AsyncClient(base_url=server.base_url, timeout=300)
    events = Events(admin)
    follower = asyncio.create_task(events.follow())
    await asyncio.wait_for(events.connected.wait(), 30)
    load = Load(server.base_url, args.streams, args.tokens, prompts, bias)
    loader = asyncio.create_task(load.run())

    def write_model(path: Path) -> Callable[[], Awaitable[None]]:
        async def trigger() -> None:
            config.write_text(f'model = "{path}"\n')
        return trigger

    changes: list[tuple[str, str, Callable[[], Awaitable[None]]]] = [
        ("sampling (PATCH /v1/config top-k)", "top-k",
         lambda: expect_ok(admin.patch("/v1/config", json={"top-k": 7}))),
        ("logging (PUT /v1/logging log-prefix)", "log-prefix",
         lambda: expect_ok(admin.put("/v1/logging", json={"log-prefix": True}))),
        ("LoRA scale (POST /lora-adapters)", "lora-scales",
         lambda: expect_ok(public.post("/lora-adapters", json=[{"id": 0, "scale": 0.5}]))),
        ("model swap (TOML edit, watched)", "model", write_model(copies[1])),
        ("model swap (POST /v1/models load)", "model",
         lambda: expect_ok(admin.post("/v1/models", json={"action": "load", "name": str(copies[2])}))),
    ]
    rows = []
    try:
        while len(load.done) < 2 * args.streams:  # every stream warm before the first change
            await asyncio.sleep(0.1)
        for label, key, trigger in changes:
            await asyncio.sleep(args.settle)
            mark = len(events.seen)
            t0 = time.time()
            await trigger()
            answered = time.time() - t0
            event = await events.committed(mark, key)
            committed = event["time"] - t0
            rows.append({"change": label, "answer_s": answered, "commit_s": committed,
                         "generation": event["generation"], "window": (t0, event["time"])})
            print(f"{label}: committed in {committed * 1000:.0f} ms", file=sys.stderr)
    finally:
        load.stop.set()
        await loader
        follower.cancel()
        await admin.aclose()
        await public.aclose()
    for row in rows:  # only now has every request that overlapped a change finished
        window = load.overlapping(*row.pop("window"))
        row.update(overlapping_requests=len(window), failed_or_truncated=sum(not d.ok for d in window))
    failed = [d.result for d in load.done if not d.ok]
    rows.append({"change": "whole run", "requests": len(load.done), "failed_or_truncated": len(failed),
                 "examples": [f"tokens={r.tokens} finish={r.finish_reason} error={r.error}" for r in failed[:5]]})
    return rows


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoint", type=Path)
    ap.add_argument("--streams", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=32, help="tokens per request of the load")
    ap.add_argument("--settle", type=float, default=2.0, help="seconds of plain load between changes")
    ap.add_argument("--out", type=Path, help="JSON output (default .cache/bench-results/reload-NAME.json)")
    args = ap.parse_args(argv)
    checkpoint = args.checkpoint.resolve()
    home = Path(tempfile.mkdtemp(prefix="mlxd-b-"))  # short: a socket path must fit in 108 bytes
    try:
        copies = [checkpoint, home / "twin", home / "twin2"]
        for copy in copies[1:]:
            shutil.copytree(checkpoint, copy)
        from mlxd.engine.loading.loader import load_model
        from mlxd.dev.synth_lora import make_adapter

        adapter = make_adapter(load_model(checkpoint).model, home / "lora", seed=3)
        config = home / "mlxd.toml"
        config.write_text(f'model = "{checkpoint}"\n')
        argv_server = [str(BIN / "mlxd-server"), "--config", str(config), "--watch-config", "--host", "127.0.0.1",
                       "--port", "0", "--parallel", str(args.streams), "--ctx-size", str(args.streams * 256),
                       "--lora", str(adapter), "--admin-listen", f"unix:{home / 'admin.sock'}"]
        with Server("mlxd", argv_server, home / "mlxd.log") as server:
            rows = asyncio.run(run(args, home, server, config, copies, Prompts(checkpoint), eos_bias(checkpoint)))
            blas = next((ln.split(": ", 1)[1] for ln in server.log().splitlines() if "cpu-blas" in ln), "?")
    finally:
        shutil.rmtree(home, ignore_errors=True)
    report = {"checkpoint": str(args.checkpoint), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "command": " ".join([Path(sys.argv[0]).as_posix(), *argv]), "streams": args.streams,
              "tokens": args.tokens, "blas": blas, "changes": rows}
    out = args.out or Path(".cache/bench-results") / f"reload-{checkpoint.name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    print("| change | answer ms | trigger to committed ms | requests overlapping | failed or truncated |")
    print("|---|---|---|---|---|")
    for row in rows[:-1]:
        print(f"| {row['change']} | {row['answer_s'] * 1000:.0f} | {row['commit_s'] * 1000:.0f} | "
              f"{row['overlapping_requests']} | {row['failed_or_truncated']} |")
    total = rows[-1]
    print(f"| whole run | | | {total['requests']} | {total['failed_or_truncated']} |")
    print(f"\nJSON: {out}")
    return 1 if total["failed_or_truncated"] else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
