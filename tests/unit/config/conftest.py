"""Fixtures for the configuration tests: a resolver that never reads the machine's own config files."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from mlxd.config import ResolvedConfig, resolve


@pytest.fixture
def resolve_in(tmp_path: Path) -> Callable[..., ResolvedConfig]:
    """resolve() with /etc and the user's config dir moved under tmp_path."""
    etc = tmp_path / "etc-llama.cpp"
    home_cfg = tmp_path / "xdg"

    def run(argv: list[str], env: Mapping[str, str] | None = None, **kw: object) -> ResolvedConfig:
        full_env = {"XDG_CONFIG_HOME": str(home_cfg), **(env or {})}
        return resolve(argv, full_env, system_config_dir=etc, **kw)  # type: ignore[arg-type]

    return run


def write(path: Path, text: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return str(path)
