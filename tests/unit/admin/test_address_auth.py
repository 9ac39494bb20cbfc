"""The admin address grammar, the default socket, stale-socket detection and the bearer check."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from mlxd.admin.address import (AdminAddress, client_default, default_socket_path, parse, prepare_socket_dir,
                                 socket_in_use)
from mlxd.admin.auth import check_bearer, read_token
from mlxd.admin.listener import admin_endpoint
from mlxd.config import resolve
from mlxd.errors import AdminError, ConfigError


@pytest.mark.parametrize("text, expected", [
    ("unix:/run/x/admin.sock", AdminAddress(unix_path="/run/x/admin.sock")),
    ("/tmp/a.sock", AdminAddress(unix_path="/tmp/a.sock")),
    ("127.0.0.1:8081", AdminAddress(host="127.0.0.1", port=8081)),
    ("[::1]:9000", AdminAddress(host="::1", port=9000)),
])
def test_parse(text: str, expected: AdminAddress) -> None:
    assert parse(text) == expected


@pytest.mark.parametrize("text", ["unix:", "localhost", "host:port", "127.0.0.1:70000"])
def test_parse_refuses(text: str) -> None:
    with pytest.raises(ConfigError, match="admin-listen"):
        parse(text)


def test_default_socket_follows_the_runtime_directory() -> None:
    assert default_socket_path({"XDG_RUNTIME_DIR": "/run/user/7"}) == "/run/user/7/mlxd/admin.sock"
    fallback = "/run/mlxd/admin.sock" if os.geteuid() == 0 else f"/tmp/mlxd-{os.geteuid()}/admin.sock"
    assert default_socket_path({}) == fallback
    assert parse(None, {"XDG_RUNTIME_DIR": "/r"}) == AdminAddress(unix_path="/r/mlxd/admin.sock")


def test_socket_in_use_tells_live_from_stale(tmp_path: Path) -> None:
    path = tmp_path / "s.sock"
    assert not socket_in_use(str(path))
    live = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    live.bind(str(path))
    live.listen(1)
    assert socket_in_use(str(path))
    live.close()  # the file stays behind: stale
    assert not socket_in_use(str(path))
    regular = tmp_path / "file.sock"
    regular.write_text("")
    with pytest.raises(ConfigError, match="not a socket"):
        socket_in_use(str(regular))


def test_the_default_directory_is_created_private(tmp_path: Path) -> None:
    path = tmp_path / "run" / "mlxd" / "admin.sock"
    prepare_socket_dir(str(path), create=True)
    assert (path.parent.stat().st_mode & 0o777) == 0o700
    path.parent.chmod(0o777)
    with pytest.raises(ConfigError, match="not writable by others"):
        prepare_socket_dir(str(path), create=True)


def test_tcp_needs_a_token_file(tmp_path: Path) -> None:
    cfg = resolve(["--admin-listen", "127.0.0.1:0"], {}).config
    with pytest.raises(ConfigError, match="admin-token-file"):
        admin_endpoint(cfg, {})
    token = tmp_path / "token"
    token.write_text(" secret-token \n")
    cfg = resolve(["--admin-listen", "127.0.0.1:0", "--admin-token-file", str(token)], {}).config
    endpoint = admin_endpoint(cfg, {})
    assert endpoint is not None and endpoint.token == "secret-token" and endpoint.bind_host == "127.0.0.1"
    assert admin_endpoint(resolve(["--admin-listen", "off"], {}).config, {}) is None


def test_read_token_refuses_an_empty_file(tmp_path: Path) -> None:
    empty = tmp_path / "token"
    empty.write_text("\n")
    with pytest.raises(ConfigError, match="empty"):
        read_token(str(empty))
    with pytest.raises(ConfigError, match="cannot read"):
        read_token(str(tmp_path / "missing"))


@pytest.mark.parametrize("header", [None, "", "Bearer", "Bearer wrong", "Basic tok-1234", "tok-1234"])
def test_check_bearer_refuses(header: str | None) -> None:
    with pytest.raises(AdminError) as caught:
        check_bearer(header, "tok-1234")
    assert (caught.value.code, caught.value.status) == ("unauthorized", 401)


def test_check_bearer_accepts() -> None:
    check_bearer("Bearer tok-1234", "tok-1234")
    check_bearer("bearer tok-1234", "tok-1234")
    check_bearer(None, None)  # a Unix socket without a token: the file mode guards it


def test_the_client_finds_the_service_socket(tmp_path: Path) -> None:
    runtime = tmp_path / "runtime"
    assert client_default({"XDG_RUNTIME_DIR": str(runtime)}) in (
        str(runtime / "mlxd" / "admin.sock"), "/run/mlxd/admin.sock", f"/tmp/mlxd-{os.geteuid()}/admin.sock")
    (runtime / "mlxd").mkdir(parents=True)
    live = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        live.bind(str(runtime / "mlxd" / "admin.sock"))
        assert client_default({"XDG_RUNTIME_DIR": str(runtime)}) == str(runtime / "mlxd" / "admin.sock")
    finally:
        live.close()
