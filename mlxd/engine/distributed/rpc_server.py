"""``mlxd rpc-server -H HOST -p PORT [--rpc-token-file FILE]``: a machine's offer to hold a share of a model.

It spells b10621's rpc-server options and, like it, waits for a front end (``mlxd-server --rpc HOST:PORT``). It is
light and long-lived: it holds no model itself. For each group a front end forms, it starts one rank process
(rank.py), reports the rank's state and heartbeats on the control connection (protocol.py), and ends the rank when
the front end says ``leave`` or the control connection drops, so a rank never outlives its group.

b10621's rpc-server is unauthenticated; this one accepts only a front end presenting the token of
``--rpc-token-file``, required when it binds anything but a loopback address.
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import ipaddress
import json
import logging
import os
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

from mlxd.engine.distributed.protocol import HEARTBEAT_S, RankSpec, line, parse

log = logging.getLogger("mlxd.rpc_server")

EXIT_CONFIG = 2


def read_token(path: str | None) -> str | None:
    """The token in ``path`` (surrounding whitespace dropped); None without a file."""
    if path is None:
        return None
    token = Path(path).read_text().strip()
    if not token:
        raise ValueError(f"--rpc-token-file {path} is empty")
    return token


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


class _Session:
    """One front end's control connection and the rank it asked for."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.rank: asyncio.subprocess.Process | None = None
        self.state = "idle"
        self.shard = ""
        self.memory_bytes = 0

    def say(self, message: dict[str, Any]) -> None:
        self.writer.write(line(message))

    async def heartbeats(self) -> None:
        while True:
            self.say({"op": "heartbeat", "state": self.state, "shard": self.shard,
                      "memory_bytes": self.memory_bytes, "t": time.time()})
            await self.writer.drain()
            await asyncio.sleep(HEARTBEAT_S)

    async def join(self, spec: RankSpec) -> None:
        await self.end_rank()
        self.state = "loading"
        self.rank = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "mlxd.engine.distributed.rank", stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, start_new_session=True)
        assert self.rank.stdin is not None
        self.rank.stdin.write(spec.model_dump_json().encode() + b"\n")
        await self.rank.stdin.drain()
        asyncio.ensure_future(self.watch(self.rank))
        log.info("rank %d of %d started for %s (pid %d)", spec.rank, spec.world, spec.model, self.rank.pid)

    async def watch(self, rank: asyncio.subprocess.Process) -> None:
        assert rank.stdout is not None
        async for raw in rank.stdout:
            try:
                report = json.loads(raw)
            except ValueError:
                continue
            self.state = str(report.get("state", self.state))
            self.shard = str(report.get("shard", self.shard))
            self.memory_bytes = int(report.get("memory_bytes", self.memory_bytes))
            self.say({"op": "rank", **report})
        code = await rank.wait()
        if rank is self.rank:
            self.state, self.rank = "exited", None
            self.say({"op": "rank_exited", "code": code})
            log.warning("rank process %d ended with %s", rank.pid, code)

    async def end_rank(self) -> None:
        rank, self.rank = self.rank, None
        if rank is None or rank.returncode is not None:
            return
        try:
            os.killpg(rank.pid, signal.SIGKILL)  # its group is over; nothing of it is worth keeping
        except ProcessLookupError:
            pass
        await rank.wait()
        self.state = "idle"


async def _serve_one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, token: str | None) -> None:
    session = _Session(reader, writer)
    peer = writer.get_extra_info("peername")
    beats: asyncio.Task[None] | None = None
    try:
        hello = parse(await asyncio.wait_for(reader.readline(), 10.0))
        given = str(hello.get("token") or "")
        if hello["op"] != "hello" or (token is not None and not hmac.compare_digest(given, token)):
            log.warning("refused a front end at %s: wrong or missing token", peer)
            session.say({"op": "refused", "error": "wrong or missing token (--rpc-token-file)"})
            await writer.drain()
            return
        session.say({"op": "welcome", "pid": os.getpid()})
        beats = asyncio.ensure_future(session.heartbeats())
        while raw := await reader.readline():
            message = parse(raw)
            if message["op"] == "reserve":
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                host = writer.get_extra_info("sockname")[0]
                sock.bind((host, 0))
                port = sock.getsockname()[1]
                sock.close()
                session.say({"op": "reserved", "host": host, "port": port})
            elif message["op"] == "join":
                await session.join(RankSpec.model_validate(message["spec"]))
            elif message["op"] == "leave":
                await session.end_rank()
                session.say({"op": "left"})
            await writer.drain()
    except (asyncio.TimeoutError, ValueError, KeyError, ConnectionError) as exc:
        log.info("control connection from %s ended: %s", peer, exc)
    finally:
        if beats is not None:
            beats.cancel()
        await session.end_rank()
        writer.close()


async def serve(host: str, port: int, token: str | None, ready: "asyncio.Future[int] | None" = None) -> None:
    server = await asyncio.start_server(lambda r, w: _serve_one(r, w, token), host, port)
    bound = server.sockets[0].getsockname()[1]
    log.info("mlxd rpc-server listening on %s:%d", host, bound)
    print(f"mlxd rpc-server: listening on {host}:{bound}", flush=True)
    if ready is not None:
        ready.set_result(bound)
    async with server:
        await server.serve_forever()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="mlxd rpc-server", description="Hold a share of a model for a front end "
                                     "started with --rpc HOST:PORT.")
    parser.add_argument("-H", "--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("-p", "--port", type=int, default=50052, help="control port (default 50052)")
    parser.add_argument("--rpc-token-file", default=os.environ.get("MLXD_RPC_TOKEN_FILE"),
                        help="file with the token a front end must present (required off loopback)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    try:
        token = read_token(args.rpc_token_file)
    except (OSError, ValueError) as exc:
        print(f"error: --rpc-token-file: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    if token is None and not is_loopback(args.host):
        print(f"error: --host {args.host} is not a loopback address: give --rpc-token-file FILE (the same token "
              "as the front end's), so that only your front end can use this machine", file=sys.stderr)
        return EXIT_CONFIG
    try:
        asyncio.run(serve(args.host, args.port, token))
    except KeyboardInterrupt:
        return 0
    return 0
