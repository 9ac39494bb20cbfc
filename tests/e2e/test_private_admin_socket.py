"""A test daemon started without --admin-listen takes the default admin socket, which tests/conftest.py makes
private to the test run: never the user's /run/mlxd/admin.sock or /tmp/mlxd-UID/admin.sock (issue 28, item 13)."""

from __future__ import annotations

import os
from pathlib import Path

from mlxd.admin.address import default_socket_path
from tests.conftest import PRIVATE_RUNTIME_DIR
from tests.e2e.admin_harness import mlxd_admin, wait_for


def test_the_default_admin_socket_is_private_to_the_test_run(start_server) -> None:
    private = Path(PRIVATE_RUNTIME_DIR) / "mlxd" / "admin.sock"
    assert os.environ["XDG_RUNTIME_DIR"] == PRIVATE_RUNTIME_DIR
    assert default_socket_path() == str(private)
    running = start_server()
    # Another test's daemon (the session's shared one, say) may hold the run's private socket already: then this one
    # says so and starts without it. Either way the socket it reached for is the private one.
    bound, held = f"admin listening on http+unix://{private}", f"admin listener not started: {private} belongs to"
    wait_for(lambda: bound in running.log() or held in running.log(), 60, "the admin listener's verdict")
    assert mlxd_admin(private, "status").returncode == 0  # whichever test daemon holds it answers
    assert "/run/mlxd" not in running.log()
    own = bound in running.log()
    running.stop()
    assert not own or not private.exists()
