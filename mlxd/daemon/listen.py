"""Opening the listening sockets before the server starts, so port 0 is resolved and logged once bound."""

from __future__ import annotations

import os
import socket
import ssl
from dataclasses import dataclass

from mlxd.errors import ConfigError, ConfigProblem


@dataclass(frozen=True)
class Listener:
    """A bound, listening socket and how to name it in logs and URLs."""

    sock: socket.socket
    url: str
    unix_path: str | None = None

    def close(self) -> None:
        self.sock.close()
        if self.unix_path:
            try:
                os.unlink(self.unix_path)
            except FileNotFoundError:
                pass


def bind(host: str, port: int, *, option: str = "host", tls: bool = False, mode: int | None = None,
         reuse_port: bool = False) -> Listener:
    """Bind HOST:PORT (port 0 picks a free one), or a Unix socket when HOST ends in ``.sock`` (llama-server's rule)
    or starts with ``unix:``; ``mode`` is the socket file's permission bits, set from its creation on;
    ``reuse_port`` (``--reuse-port``) lets other processes bind the same TCP port (SO_REUSEPORT)."""
    scheme = "https" if tls else "http"
    try:
        if host.endswith(".sock") or host.startswith("unix:"):
            path = host[len("unix:"):] if host.startswith("unix:") else host
            if os.path.exists(path):
                os.unlink(path)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            # The umask makes the file private from the moment it exists, not only after the chmod.
            old_umask = os.umask(0o777 & ~mode) if mode is not None else None
            try:
                sock.bind(path)
            finally:
                if old_umask is not None:
                    os.umask(old_umask)
            if mode is not None:
                os.chmod(path, mode)
            sock.listen(1024)
            return Listener(sock, f"{scheme}+unix://{path}", unix_path=path)
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, _, _, _, address = infos[0]
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(address)
        sock.listen(1024)
        bound_host, bound_port = sock.getsockname()[:2]
        shown = f"[{bound_host}]" if family == socket.AF_INET6 else bound_host
        return Listener(sock, f"{scheme}://{shown}:{bound_port}")
    except OSError as exc:
        problem = ConfigProblem(option, None, f"cannot listen: {exc.strerror or exc}", f"{host}:{port}")
        raise ConfigError([problem]) from exc


# File descriptors kept back from --connections-max for everything else: model files, logs, the admin listener,
# the watcher, MLX and the tokenizers' own.
FD_RESERVE = 256
AUTO_CONNECTIONS_MAX = 16384


def import_mlx_lm_keeping_limits() -> None:
    """Import mlx_lm with its import-time ``setrlimit(RLIMIT_NOFILE, (2048, 4096))`` made a no-op.

    That call would lower the hard limit for good (2,000 connections would then exhaust the descriptors whatever
    the daemon raised), and under a hard limit below 4096 (a container's 1024) it raises ValueError and the model
    never loads. The daemon sets the limit itself, below.
    """
    import sys

    try:
        import resource
    except ImportError:  # not a POSIX system: no limit to keep
        return
    if "mlx_lm.utils" in sys.modules:
        return
    real = resource.setrlimit
    resource.setrlimit = lambda *args, **kwargs: None
    try:
        import mlx_lm.utils  # noqa: F401
    except ImportError:
        pass
    finally:
        resource.setrlimit = real


def raise_open_files_limit() -> int:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit (what a service manager allows); the soft limit
    now in force. The default soft limit (often 1024) is far below what a server with keep-alive clients needs."""
    try:
        import resource
    except ImportError:  # not a POSIX system
        return 1024
    import_mlx_lm_keeping_limits()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return int(soft if soft != resource.RLIM_INFINITY else wanted)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        return int(wanted)
    except (ValueError, OSError):  # macOS caps the soft limit below an "unlimited" hard one
        for candidate in (65536, 10240):
            if soft < candidate <= wanted:
                try:
                    resource.setrlimit(resource.RLIMIT_NOFILE, (candidate, hard))
                    return candidate
                except (ValueError, OSError):
                    continue
        return int(soft)


def connections_cap(requested: int, open_files: int) -> int:
    """``--connections-max``: the value given, else (0) the descriptor limit less the reserve; never above what the
    descriptor limit leaves, since an accept() that fails for want of a descriptor is what the cap prevents."""
    room = max(16, open_files - FD_RESERVE)
    return min(requested, room) if requested > 0 else min(AUTO_CONNECTIONS_MAX, room)


def tls_context(cert_file: str | None, key_file: str | None) -> ssl.SSLContext | None:
    """llama-server serves HTTPS when both --ssl-cert-file and --ssl-key-file are given."""
    if not cert_file and not key_file:
        return None
    if not (cert_file and key_file):
        missing = "ssl-key-file" if cert_file else "ssl-cert-file"
        raise ConfigError([ConfigProblem(missing, None,
                                         "both --ssl-cert-file and --ssl-key-file are required for TLS")])
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(cert_file, key_file)
    except (OSError, ssl.SSLError) as exc:
        problem = ConfigProblem("ssl-cert-file", None, f"cannot load certificate/key: {exc}", cert_file)
        raise ConfigError([problem]) from exc
    return context
