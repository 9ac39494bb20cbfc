"""The admin listener's routes and the `mlxd admin` client.

Public surface for the daemon: :func:`admin_endpoint` (where to listen, which token), :func:`admin_address` (the same
checks without touching the socket, for the preflight) and :func:`create_admin_app`.
"""

from mlxd.admin.app import create_admin_app
from mlxd.admin.listener import AdminEndpoint, admin_address, admin_endpoint

__all__ = ["AdminEndpoint", "admin_address", "admin_endpoint", "create_admin_app"]
