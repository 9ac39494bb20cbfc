"""TOML ``[models.NAME]`` tables take the presets file's router-only keys (docs/precedence.md rule 2.8)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlxd.config import ConfigError, resolve


def resolve_toml(tmp_path: Path, text: str) -> dict:
    (tmp_path / "mlxd.toml").write_text(text)
    (tmp_path / "p.ini").write_text("[alpha]\nstop-timeout = 3\nload-on-startup = false\n")
    argv = ["--config", str(tmp_path / "mlxd.toml"), "--models-preset", str(tmp_path / "p.ini")]
    return {name: m.extras for name, m in resolve(argv, {}, read_config_ini=False).models.items()}


def test_model_tables_take_router_keys_over_the_presets_file(tmp_path: Path) -> None:
    extras = resolve_toml(tmp_path, '[models.alpha]\nload-on-startup = true\nmodel = "/m/alpha"\n'
                                    '[models.beta]\nmodel = "/m/beta"\nstop-timeout = 30\n')
    assert extras == {"alpha": {"stop-timeout": 3, "load-on-startup": True}, "beta": {"stop-timeout": 30}}


@pytest.mark.parametrize("table, message", [
    ('[models.alpha]\nload-on-startup = "yes"\n', "expected a boolean"),
    ("[models.alpha]\nstop-timeout = -1\n", "expected a whole number of seconds"),
    ('[models."*"]\nload-on-startup = true\n', "names one model, not every model"),
])
def test_bad_router_keys_are_refused(tmp_path: Path, table: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        resolve_toml(tmp_path, table)
