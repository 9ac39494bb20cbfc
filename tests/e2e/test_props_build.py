"""``/props`` reports which BLAS mlx's CPU backend runs on (``--cpu-blas``), as the startup log does."""

from __future__ import annotations

import re

from tests.e2e.conftest import RunningServer


def test_props_build_info_names_the_blas(server: RunningServer) -> None:
    with server.client() as client:
        build = client.get("/props").json()["build_info"]
    # b10621's shape first (b<build>-<commit>): the build mlxd serves the surface of, then mlxd's own version.
    match = re.fullmatch(r"b10621-mlxd-\S+ \(cpu-blas: (system|bundled|platform)\)", build)
    assert match, build
    assert f"cpu-blas auto: {match.group(1)}" in server.log()
