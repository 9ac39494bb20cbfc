"""The front end's distributed group: form it, watch it, and re-form it from fresh processes when a member goes.

The front end (HTTP, admin, the one writer) is never a member: MLX cannot initialise a group twice in one process,
so rank 0 is a child process and every peer's rank a child of its `mlxd rpc-server`. Forming: greet each peer with
the token, have it reserve a data port, start rank 0, send each peer its RankSpec, wait until rank 0 says ready.
Watching: the peers' heartbeats, their ranks' exits, rank 0's process and link. On any loss the whole group is
torn down at once (in-flight requests end with the reason, rank 0 is killed, each peer ends its rank when its
control connection closes), then formed again with back-off until every peer answers.
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, Callable

from mlxd.engine.distributed import wire
from mlxd.engine.distributed.protocol import SILENCE_S, PeerState, RankSpec, line, parse
from mlxd.engine.distributed.remote import RemoteWorker

log = logging.getLogger("mlxd.engine.distributed.group")

CONNECT_S = 2.0
LOAD_S = 300.0  # a rank reading its share of a large model from a slow disk
BACKOFF_S = (0.5, 1.0, 2.0, 4.0)


class Lost(Exception):
    """A member is missing or gone; the message names it."""


@dataclass(frozen=True)
class GroupPlan:
    model: str
    peers: tuple[str, ...]  # "host:port" of each rpc-server, rank 1.. in order
    split_mode: str
    tensor_split: tuple[float, ...]
    backend: str
    token: str | None
    settings: dict[str, Any]


class _Peer:
    def __init__(self, state: PeerState) -> None:
        self.state = state
        self.sock: socket.socket | None = None

    def connect(self, token: str | None, inbox: "queue.Queue[tuple[int, dict[str, Any] | None]]") -> tuple[str, int]:
        host, _, port = self.state.address.rpartition(":")
        self.state.state = "connecting"
        try:
            sock = socket.create_connection((host, int(port)), timeout=CONNECT_S)
        except OSError as exc:
            self.state.state = "missing"
            raise Lost(f"peer {self.state.address} (rank {self.state.rank}) is missing: {exc}") from exc
        sock.settimeout(CONNECT_S)
        self.sock = sock
        reader = sock.makefile("rb")
        sock.sendall(line({"op": "hello", "token": token or ""}))
        answer = parse(reader.readline() or b'{"op":"closed"}')
        if answer["op"] != "welcome":
            self.state.state = "refused"
            raise Lost(f"peer {self.state.address} refused the front end: {answer.get('error', answer['op'])}")
        sock.sendall(line({"op": "reserve"}))
        while (answer := parse(reader.readline() or b'{"op":"closed"}'))["op"] == "heartbeat":
            pass
        if answer["op"] != "reserved":
            raise Lost(f"peer {self.state.address} did not reserve a port: {answer}")
        sock.settimeout(None)
        threading.Thread(target=self._read, args=(reader, inbox), daemon=True, name="mlxd-peer").start()
        return str(answer["host"]), int(answer["port"])

    def _read(self, reader: Any, inbox: "queue.Queue[tuple[int, dict[str, Any] | None]]") -> None:
        try:
            while raw := reader.readline():
                inbox.put((self.state.rank, parse(raw)))
        except (OSError, ValueError):
            pass
        inbox.put((self.state.rank, None))

    def send(self, message: dict[str, Any]) -> None:
        assert self.sock is not None
        self.sock.sendall(line(message))

    def close(self) -> None:
        sock, self.sock = self.sock, None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()


class Group:
    """One distributed model's group, kept formed by a thread of its own; ``worker`` serves through it."""

    def __init__(self, plan: GroupPlan, worker: RemoteWorker,
                 on_event: Callable[[str, dict[str, Any]], None] | None = None) -> None:
        self.plan = plan
        self.worker = worker
        self.on_event = on_event or (lambda name, data: None)
        self.rank0 = PeerState(address="local", rank=0, state="forming")
        self.peers = [_Peer(PeerState(address=a, rank=i + 1)) for i, a in enumerate(plan.peers)]
        self.last_error: str | None = None
        self.formed_at: float | None = None
        self.incarnation = 0
        self._stop = threading.Event()
        self._process: subprocess.Popen[bytes] | None = None
        self._ready = threading.Event()
        self._first = threading.Event()  # the first forming has ended, formed or not
        self._thread = threading.Thread(target=self._run, name="mlxd-group", daemon=True)

    # -- the daemon's side -------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def wait_ready(self, timeout: float) -> bool:
        return self._ready.wait(timeout)

    def wait_first(self, timeout: float) -> bool:
        """Wait for the first forming to end; whether the group is formed."""
        self._first.wait(timeout)
        return self._ready.is_set()

    def close(self) -> None:
        """End the group for good (the model is unloaded): no re-forming."""
        self._stop.set()
        self._teardown("the model was unloaded")
        self._thread.join(timeout=5.0)

    def status(self) -> list[dict[str, Any]]:
        """Every member (rank 0 first): address, rank, shard, state, memory, last heartbeat, error."""
        return [self.rank0.model_dump()] + [p.state.model_dump() for p in self.peers]

    # -- the thread ----------------------------------------------------------------------------------------
    def _run(self) -> None:
        attempt = 0
        while not self._stop.is_set():
            inbox: queue.Queue[tuple[int, dict[str, Any] | None]] = queue.Queue()
            try:
                try:
                    self._form(inbox)
                finally:
                    self._first.set()
                attempt = 0
                reason = self._watch(inbox)
            except Lost as exc:
                reason = str(exc)
            except (EOFError, OSError, ValueError, KeyError) as exc:  # a member went mid-sentence
                reason = f"the group could not form: {type(exc).__name__}: {exc}"
            except Exception as exc:  # a bug here must not end the supervision: the group would never return
                log.exception("distributed group: unexpected failure")
                reason = f"internal error: {type(exc).__name__}: {exc}"
            if self._stop.is_set():  # closed meanwhile: end whatever this round started
                self._teardown("the model was unloaded")
                return
            self.last_error = reason
            log.error("distributed group lost: %s; re-forming", reason)
            self.on_event("group_lost", {"reason": reason})
            self._teardown(reason)
            self._stop.wait(BACKOFF_S[min(attempt, len(BACKOFF_S) - 1)])
            attempt += 1

    def _form(self, inbox: "queue.Queue[tuple[int, dict[str, Any] | None]]") -> None:
        self.rank0.state = "forming"
        hosts = []
        for peer in self.peers:
            hosts.append("%s:%d" % peer.connect(self.plan.token, inbox))
        local_ip = self.peers[0].sock.getsockname()[0] if self.peers and self.peers[0].sock else "127.0.0.1"
        with socket.socket() as probe:
            probe.bind((local_ip, 0))
            hosts.insert(0, f"{local_ip}:{probe.getsockname()[1]}")
        self.incarnation += 1
        group_id = f"{uuid.uuid4().hex[:8]}-{self.incarnation}"
        specs = [RankSpec(model=self.plan.model, rank=r, world=len(hosts), backend=self.plan.backend,  # type: ignore[arg-type]
                          hosts=hosts, split_mode=self.plan.split_mode,  # type: ignore[arg-type]
                          tensor_split=list(self.plan.tensor_split), settings=self.plan.settings, group_id=group_id)
                 for r in range(len(hosts))]
        conn = self._spawn_rank0(specs[0])
        for peer in self.peers:
            peer.state.state = "loading"
            peer.send({"op": "join", "spec": specs[peer.state.rank].model_dump()})
        self.rank0.address, self.rank0.state = hosts[0], "loading"
        deadline = time.monotonic() + LOAD_S
        while not conn.poll(0.1):
            if self._stop.is_set():
                raise Lost("the model was unloaded while its group formed")
            self._drain(inbox)
            if self._process is not None and self._process.poll() is not None:
                raise Lost(f"rank 0 ended while the group formed (exit {self._process.returncode})")
            if time.monotonic() > deadline:
                raise Lost(f"the group did not form in {LOAD_S:.0f} s")
        message = wire.loads(conn.recv_bytes())
        if message[0] != "ready":
            raise Lost(f"rank 0 did not come up: {message}")
        facts: dict[str, Any] = message[1]
        self.rank0.state, self.rank0.shard = "ready", str(facts.get("shard", ""))
        self.rank0.memory_bytes, self.rank0.last_heartbeat = int(facts.get("memory_bytes", 0)), time.time()
        while any(peer.state.state != "ready" for peer in self.peers):  # their word follows rank 0's by a moment
            self._drain(inbox, wait=0.1)
            if time.monotonic() > deadline:
                raise Lost("a peer's rank did not report ready")
        self.worker.attach(conn, facts)
        self.formed_at, self.last_error = time.time(), None
        self._ready.set()
        log.info("distributed group formed: %d ranks, %s split", len(hosts), self.plan.split_mode)
        self.on_event("group_formed", {"ranks": len(hosts), "split_mode": self.plan.split_mode})

    def _spawn_rank0(self, spec: RankSpec) -> Connection:
        ours, theirs = socket.socketpair()
        env = dict(os.environ, MLXD_RANK_LINK=str(theirs.fileno()))
        self._process = subprocess.Popen([sys.executable, "-m", "mlxd.engine.distributed.rank"],
                                         stdin=subprocess.PIPE, pass_fds=(theirs.fileno(),), env=env,
                                         start_new_session=True)
        theirs.close()
        assert self._process.stdin is not None
        self._process.stdin.write(spec.model_dump_json().encode() + b"\n")
        self._process.stdin.close()
        return Connection(ours.detach())

    def _drain(self, inbox: "queue.Queue[tuple[int, dict[str, Any] | None]]", wait: float = 0.0) -> None:
        """Apply what the peers said; raises Lost when one has gone."""
        try:
            item = inbox.get(timeout=wait) if wait else inbox.get_nowait()
            while True:
                self._apply(*item)
                item = inbox.get_nowait()
        except queue.Empty:
            pass

    def _apply(self, rank: int, message: dict[str, Any] | None) -> None:
        peer = self.peers[rank - 1].state
        if message is None:
            peer.state = "lost"
            raise Lost(f"peer {peer.address} (rank {rank}) closed its control connection")
        op = message["op"]
        if op == "heartbeat":
            peer.last_heartbeat = time.time()
            peer.memory_bytes = int(message.get("memory_bytes", peer.memory_bytes))
        elif op == "rank":
            peer.state = str(message.get("state", peer.state))
            peer.shard = str(message.get("shard", peer.shard))
            peer.memory_bytes = int(message.get("memory_bytes", peer.memory_bytes))
            if peer.state in ("failed", "broken"):
                raise Lost(f"peer {peer.address} (rank {rank}): {message.get('error', peer.state)}")
        elif op == "rank_exited":
            peer.state = "exited"
            raise Lost(f"peer {peer.address} (rank {rank}): its rank process ended (exit {message.get('code')})")

    def _watch(self, inbox: "queue.Queue[tuple[int, dict[str, Any] | None]]") -> str:
        while not self._stop.is_set():
            try:
                self._drain(inbox, wait=0.1)
            except Lost as exc:
                return str(exc)
            now = time.time()
            for peer in self.peers:
                if peer.state.last_heartbeat is not None and now - peer.state.last_heartbeat > SILENCE_S:
                    peer.state.state = "lost"
                    return f"peer {peer.state.address} (rank {peer.state.rank}) silent for {SILENCE_S:.0f} s"
            if self._process is not None and self._process.poll() is not None:
                return f"rank 0 ended (exit {self._process.returncode})"
            self.rank0.last_heartbeat = now  # rank 0 is this machine's child: alive is its heartbeat
            if self.worker.down_reason is not None:
                return self.worker.down_reason
        return "stopped"

    def _teardown(self, reason: str) -> None:
        self._ready.clear()
        self.worker.fail_all(reason)
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait()
        for peer in self.peers:
            peer.close()
            if peer.state.state not in ("missing", "refused", "lost", "exited"):
                peer.state.state = "down"
        self.rank0.state = "down"
