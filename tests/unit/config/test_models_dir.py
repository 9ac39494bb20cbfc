"""``--models-dir``: one model per subdirectory holding a config.json; symlinks leading outside are skipped."""

from __future__ import annotations

from pathlib import Path

from mlxd.config import resolve


def test_only_checkpoint_subdirectories_inside_the_directory_are_models(tmp_path: Path) -> None:
    models, outside = tmp_path / "models", tmp_path / "outside"
    for where in (models / "alpha", models / "notes", outside):
        where.mkdir(parents=True)
    (models / "alpha" / "config.json").write_text("{}")
    (outside / "config.json").write_text("{}")
    (models / "beta").symlink_to(models / "alpha", target_is_directory=True)  # stays inside: a model
    (models / "escape").symlink_to(outside, target_is_directory=True)
    (models / "weights.gguf").write_bytes(b"GGUF")
    resolved = resolve(["--models-dir", str(models)], {}, read_config_ini=False)
    assert sorted(resolved.models) == ["alpha", "beta"]
    assert resolved.models["alpha"].source == "models-dir"
    skipped = "\n".join(resolved.warnings)
    assert "skipped escape: a symlink that leads outside" in skipped
    assert "skipped notes: no config.json" in skipped and "skipped weights.gguf" in skipped
