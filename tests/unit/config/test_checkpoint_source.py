"""The checkpoint's generation_config.json is a source: above the defaults, below every file, env and argv."""

from __future__ import annotations

import json
from pathlib import Path

from mlxd.config import apply_overrides
from mlxd.config.sources.checkpoint import SOURCE
from tests.unit.config.conftest import write


def _checkpoint(root: Path, name: str = "ckpt", **generation: object) -> str:
    write(root / name / "config.json", "{}")
    write(root / name / "generation_config.json", json.dumps(generation))
    return str(root / name)


def test_generation_config_gives_unset_sampling_options(resolve_in, tmp_path: Path) -> None:
    model = _checkpoint(tmp_path, temperature=0.6, top_k=20.0, top_p=0.9, do_sample=True)
    resolved = resolve_in(["-m", model])
    assert (resolved.config.temperature, resolved.config.top_k, resolved.config.top_p) == (0.6, 20, 0.9)
    assert {resolved.provenance[n] for n in ("temperature", "top-k", "top-p")} == {SOURCE}
    assert resolved.provenance["min-p"] == "default"


def test_every_other_source_beats_the_checkpoint(resolve_in, tmp_path: Path) -> None:
    model = _checkpoint(tmp_path, temperature=0.6, top_k=20, top_p=0.9)
    toml = write(tmp_path / "mlxd.toml", "top-k = 5\n")
    resolved = resolve_in(["-m", model, "--config", toml, "--temp", "1.1"])
    assert (resolved.config.temperature, resolved.config.top_k, resolved.config.top_p) == (1.1, 5, 0.9)
    assert resolved.provenance["top-k"].startswith("toml:") and resolved.provenance["temperature"] == "cli:--temp"
    from_env = resolve_in(["-m", model], {"LLAMA_ARG_TOP_K": "3"})
    assert from_env.config.top_k == 3 and from_env.provenance["top-k"] == "env:LLAMA_ARG_TOP_K"


def test_a_model_given_at_run_time_brings_its_own_checkpoint(resolve_in, tmp_path: Path) -> None:
    first = _checkpoint(tmp_path, "a", temperature=0.6)
    second = _checkpoint(tmp_path, "b", temperature=0.3)
    swapped = apply_overrides(resolve_in(["-m", first]), {"model": second})
    assert swapped.config.temperature == 0.3 and swapped.provenance["temperature"] == SOURCE


def test_no_file_a_broken_file_or_a_bad_value_leave_the_defaults(resolve_in, tmp_path: Path) -> None:
    bare = tmp_path / "bare"
    write(bare / "config.json", "{}")
    assert resolve_in(["-m", str(bare)]).provenance["temperature"] == "default"
    write(bare / "generation_config.json", "{not json")
    assert resolve_in(["-m", str(bare)]).provenance["temperature"] == "default"
    model = _checkpoint(tmp_path, "odd", top_k="many")
    resolved = resolve_in(["-m", model])
    assert resolved.provenance["top-k"] == "default" and any("top_k" in w for w in resolved.warnings)


def test_router_models_read_their_own_checkpoints(resolve_in, tmp_path: Path) -> None:
    models = tmp_path / "models"
    _checkpoint(models, "warm", temperature=0.7)
    _checkpoint(models, "cold", temperature=0.2)
    resolved = resolve_in(["--models-dir", str(models)])
    assert resolved.models["warm"].config.temperature == 0.7 and resolved.models["cold"].config.temperature == 0.2
    assert resolved.models["warm"].provenance["temperature"] == SOURCE
    assert resolved.provenance["temperature"] == "default"  # the router itself serves no checkpoint
