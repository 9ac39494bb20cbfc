"""Where the admin listener listens: ``unix:PATH`` (the default, under the runtime directory) or ``HOST:PORT``.

The default socket is ``$XDG_RUNTIME_DIR/mlxd/admin.sock``, else ``/run/mlxd/admin.sock`` for root, else
``/tmp/mlxd-$UID/admin.sock``; the daemon and ``mlxd admin`` compute it the same way, so neither needs to be told.
"""

from __future__ import annotations

import os
import socket
import stat
from dataclasses import dataclass
from typing import Mapping

from mlxd.errors import ConfigError, ConfigProblem

OPTION = "admin-listen"


@dataclass(frozen=True)
class AdminAddress:
    """A parsed ``--admin-listen``: a Unix socket path, or a TCP host and port."""

    unix_path: str | None = None
    host: str | None = None
    port: int | None = None

    @property
    def is_unix(self) -> bool:
        return self.unix_path is not None

    def __str__(self) -> str:
        return f"unix:{self.unix_path}" if self.unix_path else f"{self.host}:{self.port}"


def default_socket_path(env: Mapping[str, str] | None = None) -> str:
    """The default admin socket for this user."""
    env = os.environ if env is None else env
    runtime = env.get("XDG_RUNTIME_DIR")
    if runtime:
        return os.path.join(runtime, "mlxd", "admin.sock")
    if os.geteuid() == 0:
        return "/run/mlxd/admin.sock"
    return f"/tmp/mlxd-{os.geteuid()}/admin.sock"


def client_default(env: Mapping[str, str] | None = None) -> str:
    """The socket ``mlxd admin`` talks to by default: the first default location that holds a socket (a root shell's
    XDG_RUNTIME_DIR is not the service's), else this user's default."""
    env = os.environ if env is None else env
    candidates = [default_socket_path(env), "/run/mlxd/admin.sock", f"/tmp/mlxd-{os.geteuid()}/admin.sock"]
    for path in candidates:
        try:
            if stat.S_ISSOCK(os.stat(path).st_mode):
                return path
        except OSError:
            continue
    return candidates[0]


def parse(text: str | None, env: Mapping[str, str] | None = None) -> AdminAddress:
    """``unix:PATH``, a path ending in ``.sock``, or ``HOST:PORT`` (``[::1]:PORT`` for IPv6); None is the default."""
    if not text:
        return AdminAddress(unix_path=default_socket_path(env))
    if text.startswith("unix:") or text.endswith(".sock") or text.startswith("/"):
        path = text[len("unix:"):] if text.startswith("unix:") else text
        if not path:
            raise _problem(text, "expected unix:PATH")
        return AdminAddress(unix_path=os.path.abspath(path))
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise _problem(text, "expected unix:PATH or HOST:PORT")
    return AdminAddress(host=host.strip("[]"), port=int(port))


def _problem(value: str, message: str) -> ConfigError:
    return ConfigError([ConfigProblem(OPTION, None, message, value)])


def prepare_socket_dir(path: str, *, create: bool) -> None:
    """Make sure the socket's directory is ours and closed to others; create it 0700 when ``create``."""
    directory = os.path.dirname(path) or "."
    if create and not os.path.lexists(directory):
        try:
            os.makedirs(directory, mode=0o700, exist_ok=True)
        except OSError as exc:
            raise _problem(path, f"cannot create {directory}: {exc.strerror}") from exc
    try:
        st = os.lstat(directory)
    except OSError as exc:
        raise _problem(path, f"cannot use {directory}: {exc.strerror}") from exc
    if not stat.S_ISDIR(st.st_mode):
        raise _problem(path, f"{directory} is not a directory")
    if create and (st.st_uid != os.geteuid() or st.st_mode & 0o022):
        raise _problem(path, f"{directory} must be owned by this user and not writable by others")
    reason = unsafe_directory(directory)
    if reason:  # an explicit path too: whoever can write there can replace the socket with their own
        raise _problem(path, f"{reason}; put the socket in a private directory")


def unsafe_directory(directory: str) -> str | None:
    """Why a socket in ``directory`` could be replaced by another user (None when it cannot): the directory is
    writable by its group or by everyone, or it belongs to someone else than this user or root."""
    try:
        st = os.stat(directory)
    except OSError as exc:
        return f"cannot use {directory}: {exc.strerror}"
    if st.st_mode & 0o022:
        return f"{directory} is writable by {'everyone' if st.st_mode & 0o002 else 'its group'}"
    if st.st_uid not in (os.geteuid(), 0) and os.geteuid() != 0:
        return f"{directory} belongs to another user (uid {st.st_uid})"
    return None


def trusted_socket(path: str) -> None:
    """The client's check before it talks to a Unix socket: its directory is closed to others, so the daemon's own
    socket cannot have been swapped for an impostor's. Raises ConfigError naming the reason."""
    reason = unsafe_directory(os.path.dirname(path) or ".")
    if reason:
        raise _problem(path, f"refusing to trust the admin socket: {reason}")
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return  # nothing there: the connection fails with its own message
    except OSError as exc:
        raise _problem(path, f"cannot use it: {exc.strerror}") from exc
    if not stat.S_ISSOCK(st.st_mode):
        raise _problem(path, "refusing to trust the admin socket: it is not a socket")


def socket_in_use(path: str) -> bool:
    """Whether something answers on the Unix socket ``path`` (a stale socket file does not)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if not stat.S_ISSOCK(st.st_mode):
        raise _problem(path, "exists and is not a socket; refusing to replace it")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(1.0)
        probe.connect(path)
        return True
    except OSError:
        return False
    finally:
        probe.close()
