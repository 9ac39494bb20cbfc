"""The RoPE options travel from the configuration to the model the pool loads."""

from __future__ import annotations

from pathlib import Path

from mlxd.config import resolve
from mlxd.daemon.loading import load_served_model


def test_rope_options_reach_the_loaded_model(tiny_checkpoint: Path) -> None:
    argv = ["-m", str(tiny_checkpoint), "--rope-freq-base", "12345", "--rope-scale", "2", "--no-warmup"]
    served = load_served_model(resolve(argv, {}, read_config_ini=False))
    assert served is not None
    try:
        config = served.loaded.config
        assert config["rope_theta"] == 12345.0
        assert config["rope_scaling"] == {"type": "linear", "factor": 2.0}
        rope = served.loaded.model.model.layers[0].self_attn.rope
        assert (rope.base, rope.scale) == (12345.0, 0.5)
    finally:
        served.worker.stop(0.0)
