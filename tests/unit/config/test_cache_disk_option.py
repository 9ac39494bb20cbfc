"""--cache-disk and --cache-disk-max: mlxd's own options, from every source, off by default, read when a model loads."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlxd.config import table
from mlxd.config.layering import resolve
from mlxd.engine.settings import WorkerSettings
from mlxd.errors import ConfigError


def test_off_by_default_and_reload_effect(tmp_path: Path) -> None:
    resolved = resolve([], {}, system_config_dir=tmp_path, read_config_ini=False)
    assert resolved.config.cache_disk is None and resolved.config.cache_disk_max == 16384
    assert WorkerSettings.of(resolved.config).cache_disk is None
    for name in ("cache-disk", "cache-disk-max"):
        assert table().get(name).origin == "mlxd"
        assert "reload" in table().get(name).effects


def test_every_source(tmp_path: Path) -> None:
    cli = resolve(["--cache-disk", "/var/cache/x", "--cache-disk-max", "64"], {}, system_config_dir=tmp_path,
                  read_config_ini=False)
    assert (cli.config.cache_disk, cli.config.cache_disk_max) == ("/var/cache/x", 64)
    assert cli.provenance["cache-disk"].startswith("cli:")
    env = resolve([], {"MLXD_CACHE_DISK": "/e", "MLXD_CACHE_DISK_MAX": "-1"}, system_config_dir=tmp_path,
                  read_config_ini=False)
    assert (env.config.cache_disk, env.config.cache_disk_max) == ("/e", -1)
    assert env.provenance["cache-disk"] == "env:MLXD_CACHE_DISK"
    toml = tmp_path / "mlxd.toml"
    toml.write_text('cache-disk = "/t"\ncache-disk-max = 10\n')
    from_file = resolve(["--config", str(toml)], {}, system_config_dir=tmp_path, read_config_ini=False)
    assert (from_file.config.cache_disk, from_file.config.cache_disk_max) == ("/t", 10)
    settings = WorkerSettings.of(from_file.config)
    assert (settings.cache_disk, settings.cache_disk_max) == ("/t", 10)


def test_budget_below_minus_one_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        resolve(["--cache-disk-max", "-2"], {}, system_config_dir=tmp_path, read_config_ini=False)
