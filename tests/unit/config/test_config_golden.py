"""Golden files for command-line and INI translation: a llama-server command line as TOML (`mlxd config
from-args`), and a presets file as the per-model values it produces. Regenerate with MLXD_UPDATE_GOLDEN=1."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from mlxd.config import resolve
from mlxd.config.render import explain_data, from_args_toml

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("MLXD_UPDATE_GOLDEN") == "1"


def _check(path: Path, actual: str) -> None:
    if UPDATE:
        path.write_text(actual, encoding="utf-8")
    assert actual == path.read_text(encoding="utf-8")


@pytest.mark.parametrize("case", ["llama-server"])
def test_command_line_to_toml(case: str) -> None:
    args = (GOLDEN / f"{case}.args").read_text(encoding="utf-8").splitlines()
    _check(GOLDEN / f"{case}.toml", from_args_toml(resolve(args, {}, read_config_ini=False)))


def test_presets_ini_to_model_values() -> None:
    resolved = resolve(["--models-preset", str(GOLDEN / "presets.ini")], {}, read_config_ini=False)
    data = explain_data(resolved)["models"]
    explicit = {model: {name: entry for name, entry in options.items() if entry["source"] != "default"}
                for model, options in data.items()}
    extras = {name: m.extras for name, m in resolved.models.items()}
    actual = json.dumps({"models": explicit, "extras": extras}, indent=2, sort_keys=True) + "\n"
    _check(GOLDEN / "presets.json", actual.replace(str(GOLDEN), "GOLDEN"))


def test_router_command_line_to_model_values() -> None:
    args = (GOLDEN / "router.args").read_text(encoding="utf-8").splitlines()
    args[args.index("p.ini")] = str(GOLDEN / "presets.ini")
    resolved = resolve(args, {}, read_config_ini=False)
    data = explain_data(resolved)
    explicit = {model: {name: entry for name, entry in options.items() if entry["source"] != "default"}
                for model, options in data["models"].items()}
    router = {name: entry for name, entry in data["options"].items() if entry["source"] != "default"}
    actual = json.dumps({"router": router, "models": explicit}, indent=2, sort_keys=True) + "\n"
    _check(GOLDEN / "router.json", actual.replace(str(GOLDEN), "GOLDEN"))
