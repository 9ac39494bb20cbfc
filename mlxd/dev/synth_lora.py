"""Synthetic LoRA adapters: random, seeded, in mlx-lm's format, for a given model (tests and benchmarks).

``B`` is drawn non-zero (a trained adapter's ``B`` starts at zero and moves; a fresh one would change nothing), so
the adapter visibly changes greedy output. The default keys are the attention's query and value projections:
their outputs never reach the residual stream's channel 0, which the synthetic checkpoints keep constant.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from mlxd.engine.loading.lora import CONFIG_FILE, WEIGHTS_FILE
from mlxd.engine.loading.lora_layers import linear_dims, target_modules

if TYPE_CHECKING:
    import mlx.nn as nn

DEFAULT_KEYS = ("self_attn.q_proj", "self_attn.v_proj")


def make_adapter(
    model: nn.Module,
    out: Path,
    *,
    seed: int = 0,
    rank: int = 4,
    scale: float = 2.0,
    num_layers: int = -1,
    keys: Sequence[str] = DEFAULT_KEYS,
    std_b: float = 0.5,
    poison: float | None = None,
) -> Path:
    """Write ``adapter_config.json`` and ``adapters.safetensors`` for ``model`` into ``out``; returns ``out``.

    ``poison`` (NaN or an infinity) replaces one value of the first ``lora_b``: an adapter that must be refused."""
    import mlx.core as mx

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    key = mx.random.key(seed)
    weights: dict[str, mx.array] = {}
    for path, module in sorted(target_modules(model, num_layers, list(keys)).items()):
        dims = linear_dims(module)
        if dims is None:
            continue
        n_in, n_out = dims
        key, ka, kb = mx.random.split(key, 3)
        weights[f"{path}.lora_a"] = mx.random.normal((n_in, rank), key=ka) * (n_in**-0.5)
        weights[f"{path}.lora_b"] = mx.random.normal((rank, n_out), key=kb) * std_b
        if poison is not None:
            b = weights[f"{path}.lora_b"]
            b[0, 0] = poison
            weights[f"{path}.lora_b"], poison = b, None
    mx.save_safetensors(str(out / WEIGHTS_FILE), weights)
    config = {
        "fine_tune_type": "lora",
        "num_layers": num_layers,
        "lora_parameters": {"rank": rank, "scale": scale, "dropout": 0.0, "keys": list(keys)},
    }
    (out / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")
    return out
