"""The listening socket: --reuse-port lets a second listener share the port, as b10621's SO_REUSEPORT does."""

from __future__ import annotations

import pytest

from mlxd.daemon.listen import bind
from mlxd.errors import ConfigError


def test_reuse_port_lets_two_listeners_share_a_port() -> None:
    first = bind("127.0.0.1", 0, reuse_port=True)
    try:
        port = int(first.url.rsplit(":", 1)[1])
        second = bind("127.0.0.1", port, reuse_port=True)
        assert second.url == first.url
        second.close()
        with pytest.raises(ConfigError, match="cannot listen"):  # without it the port is taken
            bind("127.0.0.1", port).close()
    finally:
        first.close()
