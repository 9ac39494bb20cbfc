"""diff(old, new) -> ChangePlan: one test per case."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlxd.config import apply_overrides, diff
from tests.unit.config.conftest import write


def test_no_change_is_empty(resolve_in) -> None:
    plan = diff(resolve_in(["-c", "8"]), resolve_in(["--ctx-size", "8"]))
    assert plan.empty and not plan.needs_restart


def test_live_change(resolve_in) -> None:
    plan = diff(resolve_in([]), resolve_in(["--temp", "0.1"]))
    assert [(c.name, c.old, c.new) for c in plan.live] == [("temperature", 0.8, 0.1)]
    assert plan.restart == () and not plan.needs_restart


def test_restart_change_beside_a_live_one(resolve_in) -> None:
    plan = diff(resolve_in([]), resolve_in(["--port", "9000", "--api-key", "k"]))
    assert [c.name for c in plan.restart] == ["port"]
    assert [c.name for c in plan.live] == ["api-key"]
    assert plan.needs_restart and set(plan.changed) == {"port", "api-key"}


def test_admin_override_is_a_change(resolve_in) -> None:
    old = resolve_in([])
    plan = diff(old, apply_overrides(old, {"models-max": 2}))
    assert plan.changed == ("models-max",)


def test_router_models_added_removed_changed(resolve_in, tmp_path: Path) -> None:
    a = write(tmp_path / "a.ini", "[keep]\nmodel = /k\n[gone]\nmodel = /g\n[edit]\nmodel = /e\nctx-size = 1\n")
    b = write(tmp_path / "b.ini", "[keep]\nmodel = /k\n[new]\nmodel = /n\n[edit]\nmodel = /e\nctx-size = 2\n")
    plan = diff(resolve_in(["--models-preset", a]), resolve_in(["--models-preset", b]))
    assert (plan.models_added, plan.models_removed, plan.models_changed) == (("new",), ("gone",), ("edit",))
    assert [c.name for c in plan.live] == ["models-preset"]


def test_overrides_can_be_removed_and_bad_ones_change_nothing(resolve_in) -> None:
    from mlxd.config import UNSET, ConfigError

    base = resolve_in(["--temp", "0.5"])
    once = apply_overrides(base, {"temp": 0.1, "ngl": "all"})
    assert once.provenance["n-gpu-layers"] == "admin"
    cleared = apply_overrides(once, {"temp": UNSET})
    assert cleared.provenance["temperature"] == "cli:--temp" and cleared.provenance["n-gpu-layers"] == "admin"
    with pytest.raises(ConfigError) as info:
        apply_overrides(once, {"ngl": "12", "tmep": 1})
    assert {p.option for p in info.value.problems} == {"tmep"}  # unknown keys are caught before refusals
    assert once.config.temperature == 0.1
