"""Deciding the admin listener at startup: its address, its token, and whether the socket is free.

A TCP address needs --admin-token-file (refused otherwise, before anything is bound); a Unix socket is guarded by
its mode (0600) and its directory, and also asks for the token when one is configured.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Mapping

from mlxd.admin.address import AdminAddress, parse, prepare_socket_dir, socket_in_use
from mlxd.admin.auth import read_token
from mlxd.admin.persist import clean_orphans
from mlxd.errors import ConfigError, ConfigProblem
from mlxd.config import Config

log = logging.getLogger("mlxd.admin")

DISABLED = frozenset({"off", "none", "disabled"})


@dataclass(frozen=True)
class AdminEndpoint:
    """Where to bind and which token to require."""

    address: AdminAddress
    token: str | None

    @property
    def bind_host(self) -> str:
        """The host argument of mlxd.daemon.listen.bind (``unix:PATH`` for a socket)."""
        return f"unix:{self.address.unix_path}" if self.address.is_unix else str(self.address.host)

    @property
    def bind_port(self) -> int:
        return self.address.port or 0


def admin_address(cfg: Config, env: Mapping[str, str]) -> tuple[AdminAddress, str | None] | None:
    """The address and token the configuration asks for, None when turned off (``--admin-listen off``); raises
    ConfigError for an unusable setting. Reads only the token file, so ``mlxd config check`` can call it."""
    text = cfg.admin_listen
    if text is not None and text.strip().lower() in DISABLED:
        return None
    address = parse(text, env)
    token = read_token(cfg.admin_token_file) if cfg.admin_token_file else None
    if not address.is_unix and token is None:
        raise ConfigError([ConfigProblem("admin-listen", None, "a TCP admin listener requires --admin-token-file",
                                         str(address))])
    return address, token


def admin_endpoint(cfg: Config, env: Mapping[str, str]) -> AdminEndpoint | None:
    """The admin endpoint the configuration asks for; None when turned off (``--admin-listen off``) or when the
    default socket already belongs to another running daemon. Raises ConfigError for an unusable setting."""
    if cfg.config:
        # What a persist killed mid-write left next to the file: at startup no write of ours is in progress.
        clean_orphans(cfg.config, older_than=0.0)
    wanted = admin_address(cfg, env)
    if wanted is None:
        return None
    address, token = wanted
    if address.is_unix:
        path = str(address.unix_path)
        prepare_socket_dir(path, create=cfg.admin_listen is None)
        if socket_in_use(path):
            if cfg.admin_listen is not None:
                raise ConfigError([ConfigProblem("admin-listen", None, "another process is listening there", path)])
            log.warning("admin listener not started: %s belongs to another running mlxd; pass --admin-listen", path)
            return None
    return AdminEndpoint(address, token)
