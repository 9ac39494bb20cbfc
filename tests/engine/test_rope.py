"""The RoPE options reach the model through mlx-lm's config overrides: the loaded model computes what a checkpoint
whose config.json holds the same values computes, and differs from the checkpoint's own RoPE."""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
import pytest

from mlxd.config import resolve
from mlxd.engine.loading.loader import load_model
from mlxd.engine.loading.rope import RopeOptions, model_overrides
from mlxd.errors import EngineError

TOKENS = list(range(3, 67))  # long enough for the scaled positions to matter


def _logits(path: Path, overrides: dict | None = None) -> mx.array:
    loaded = load_model(path, model_config=overrides)
    out = loaded.model(mx.array([TOKENS]))
    mx.eval(out)
    return out


def _edited(checkpoint: Path, tmp_path: Path, changes: dict) -> Path:
    """A copy of ``checkpoint`` (weights linked) whose config.json carries ``changes``."""
    out = tmp_path / "edited"
    out.mkdir()
    for item in checkpoint.iterdir():
        if item.name != "config.json":
            (out / item.name).symlink_to(item)
    config = json.loads((checkpoint / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**config, **changes}))
    return out


CASES = {
    "freq-base": (["--rope-freq-base", "10000"], {"rope_theta": 10000.0}),
    "linear": (["--rope-scaling", "linear", "--rope-scale", "4"], {"rope_scaling": {"type": "linear", "factor": 4.0}}),
    "freq-scale": (["--rope-freq-scale", "0.25"], {"rope_scaling": {"type": "linear", "factor": 4.0}}),
    "yarn": (["--rope-scaling", "yarn", "--rope-scale", "4", "--yarn-orig-ctx", "32", "--yarn-beta-fast", "16",
              "--yarn-beta-slow", "2"],
             {"rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32,
                               "beta_fast": 16.0, "beta_slow": 2.0}}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_rope_options_equal_a_checkpoint_with_the_same_config(tiny_checkpoint: Path, tmp_path: Path,
                                                              case: str) -> None:
    argv, expected = CASES[case]
    options = RopeOptions.of(resolve(argv, {}, read_config_ini=False).config)
    overrides = model_overrides(tiny_checkpoint, options)
    assert overrides == expected
    served = _logits(tiny_checkpoint, overrides)
    assert mx.allclose(served, _logits(_edited(tiny_checkpoint, tmp_path, expected)), atol=1e-5).item()
    assert not mx.allclose(served, _logits(tiny_checkpoint), atol=1e-3).item()


def test_no_rope_option_overrides_nothing(tiny_checkpoint: Path) -> None:
    assert model_overrides(tiny_checkpoint, RopeOptions.of(resolve([], {}, read_config_ini=False).config)) == {}


def test_a_checkpoints_own_yarn_keeps_what_the_options_leave_unset(tiny_checkpoint: Path, tmp_path: Path) -> None:
    own = {"type": "yarn", "factor": 2.0, "original_max_position_embeddings": 64, "beta_fast": 8.0}
    edited = _edited(tiny_checkpoint, tmp_path, {"rope_scaling": own})
    assert model_overrides(edited, RopeOptions(rope_scale=4.0))["rope_scaling"] == {
        "type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64, "beta_fast": 8.0, "beta_slow": 1.0}


@pytest.mark.parametrize("options,own,why", [
    (RopeOptions(rope_scaling="none", rope_scale=2.0), None, "turns scaling off"),
    (RopeOptions(rope_scaling="linear", yarn_orig_ctx=64), None, "only to --rope-scaling yarn"),
    (RopeOptions(rope_scale=2.0), {"rope_type": "llama3", "factor": 8.0}, "name the scaling with --rope-scaling"),
    (RopeOptions(rope_scaling="yarn", yarn_ext_factor=0.5), None, "--yarn-ext-factor 0.5"),
])
def test_what_mlx_lm_cannot_do_is_refused_before_loading(tiny_checkpoint: Path, tmp_path: Path,
                                                         options: RopeOptions, own: dict | None, why: str) -> None:
    path = _edited(tiny_checkpoint, tmp_path, {"rope_scaling": own}) if own else tiny_checkpoint
    with pytest.raises(EngineError, match=why):
        model_overrides(path, options)
