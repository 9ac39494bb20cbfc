"""The admin listener's routes and the `mlxd admin` client.

Public surface for the daemon: :func:`admin_endpoint` (where to listen, which token), :func:`admin_address` (the same
checks without touching the socket, for the preflight) and :func:`create_admin_app`.

``create_admin_app`` loads on first use (PEP 562): the app imports sanic and every admin route (about 0.5 s of CPU),
which neither the `mlxd admin` client nor a configuration the preflight refuses needs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mlxd.admin.listener import AdminEndpoint, admin_address, admin_endpoint

if TYPE_CHECKING:
    from mlxd.admin.app import create_admin_app

__all__ = ["AdminEndpoint", "admin_address", "admin_endpoint", "create_admin_app"]


def __getattr__(name: str) -> object:
    if name != "create_admin_app":
        raise AttributeError(f"module 'mlxd.admin' has no attribute {name!r}")
    from mlxd.admin.app import create_admin_app as value

    globals()[name] = value  # later lookups skip this function
    return value
