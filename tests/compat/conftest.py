"""The e2e daemon fixtures, for the compat tests that pin an option's behaviour through a real ``mlxd-server``."""

from tests.e2e.conftest import server, start_server  # noqa: F401
