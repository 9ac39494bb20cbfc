"""Runtime LoRA: mlx-lm adapters served unfused, with scales that change between requests.

``--lora DIR`` and ``--lora-scaled DIR:SCALE`` name adapters in mlx-lm's format (a directory with
``adapter_config.json`` and ``adapters.safetensors``, as ``mlx_lm.lora`` writes them). Each targeted linear
becomes a :class:`~mlxd.engine.loading.lora_layers.MultiLoRALinear` holding every adapter that targets it.

Scales have two lives. The server-wide scales (``--lora-scaled``, ``POST /lora-adapters``) are what a request
gets when it names none; a request's own ``lora`` field overrides them for that request, b10621's way: adapters
it does not list get 0. Either way a request snapshots its scales when it is submitted, and the worker thread
sets the layers to a snapshot only between steps and only when no request of another snapshot is running, so a
change never alters a generation in flight.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence, cast

from mlxd.config.domains import lora_adapters
from mlxd.engine.loading.lora_layers import MultiLoRALinear, ScaleBoard, install, linear_dims, target_modules
from mlxd.errors import EngineError, InvalidRequest

if TYPE_CHECKING:
    import mlx.core as mx
    import mlx.nn as nn

CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapters.safetensors"


@dataclass(frozen=True)
class AdapterSpec:
    """One adapter as the command line names it, with its initial scale."""

    path: str
    scale: float = 1.0


def adapter_specs(lora: Sequence[str], lora_scaled: Sequence[tuple[str, float]],
                  init_without_apply: bool = False) -> list[AdapterSpec]:
    """The adapters of ``--lora`` (scale 1) then ``--lora-scaled`` (the configuration parsed its FNAME:SCALE
    values into pairs); all at 0 with ``--lora-init-without-apply``."""
    return [AdapterSpec(path, scale) for path, scale in lora_adapters(lora, lora_scaled, init_without_apply)]


def check_adapters(specs: Sequence[AdapterSpec]) -> list[AdapterSpec]:
    """Refuse a missing or malformed adapter before the model's weights are read; returns ``specs``."""
    for spec in specs:
        _check_config(spec.path, _read_config(spec.path, _adapter_dir(spec.path)))
    return list(specs)


@dataclass(frozen=True)
class Adapter:
    """A loaded adapter: where it came from, its trained scale (mlx-lm's ``lora_parameters.scale``), its size."""

    id: int
    path: str
    alpha: float
    rank: int
    n_layers: int


class LoraSet:
    """The adapters attached to one model, their server-wide scales, and the snapshot the layers compute with."""

    def __init__(self, adapters: Sequence[Adapter], scales: Sequence[float], board: ScaleBoard) -> None:
        self.adapters = tuple(adapters)
        self._server = tuple(float(s) for s in scales)  # replaced whole, so readers on any thread see one state
        self._board = board
        self.applied: tuple[float, ...] = (0.0,) * len(self.adapters)

    @classmethod
    def empty(cls) -> LoraSet:
        return cls((), (), ScaleBoard(0))

    def __len__(self) -> int:
        return len(self.adapters)

    # -- server-wide scales (any thread) ---------------------------------------------------------------------
    @property
    def scales(self) -> tuple[float, ...]:
        return self._server

    def entries(self) -> list[dict[str, Any]]:
        """``[{"id", "path", "scale"}]`` with the server-wide scales, b10621's ``GET /lora-adapters`` order."""
        scales = self._server
        return [{"id": a.id, "path": a.path, "scale": scales[a.id]} for a in self.adapters]

    def check(self, scales: Mapping[int, float]) -> dict[int, float]:
        """The full server-wide state ``scales`` asks for: listed adapters get their scale, the others 0.

        Unknown ids and non-finite scales raise ``InvalidRequest``.
        """
        unknown = sorted(i for i in scales if not 0 <= int(i) < len(self.adapters))
        if unknown:
            raise InvalidRequest(f"invalid adapter id {unknown[0]}: {len(self.adapters)} adapter(s) loaded "
                                 f"(ids 0..{len(self.adapters) - 1})" if self.adapters else
                                 f"invalid adapter id {unknown[0]}: no LoRA adapter is loaded (--lora)")
        bad = [i for i, s in scales.items() if not math.isfinite(float(s))]
        if bad:
            raise InvalidRequest(f"invalid scale for adapter {bad[0]}: {scales[bad[0]]} (a finite number)")
        return {a.id: float(scales.get(a.id, 0.0)) for a in self.adapters}

    def set_scales(self, scales: Mapping[int, float]) -> tuple[float, ...]:
        """Replace the server-wide scales (see :meth:`check`); requests already submitted keep their snapshot."""
        full = self.check(scales)
        self._server = tuple(full[a.id] for a in self.adapters)
        return self._server

    # -- snapshots -------------------------------------------------------------------------------------------
    def snapshot(self, requested: Mapping[int, float] | None) -> tuple[float, ...]:
        """A request's scales: its own ``lora`` (unlisted adapters 0, unknown ids ignored, as b10621's
        ``construct_lora_list``), or the server-wide scales when it names none."""
        if not requested:
            return self._server
        return tuple(float(requested.get(a.id, 0.0)) for a in self.adapters)

    @staticmethod
    def namespace(snapshot: Sequence[float]) -> str:
        """The prompt-cache namespace suffix of a snapshot: '' when no adapter is active (the base model)."""
        active = [f"{i}:{float(s)!r}" for i, s in enumerate(snapshot) if s != 0.0]
        return f"|lora={','.join(active)}" if active else ""

    # -- the layers (worker thread, between steps) -----------------------------------------------------------
    def apply(self, snapshot: Sequence[float]) -> None:
        """Make every adapted layer compute with ``snapshot`` from the next forward pass on."""
        self.applied = tuple(float(s) for s in snapshot)
        self._board.active = tuple(s * a.alpha for s, a in zip(self.applied, self.adapters))


def attach_adapters(model: nn.Module, specs: Sequence[AdapterSpec]) -> LoraSet:
    """Load every adapter of ``specs`` and patch ``model`` to serve them unfused; refuses what it cannot serve.

    Nothing in ``model`` changes unless every adapter loads.
    """
    if not specs:
        return LoraSet.empty()
    board = ScaleBoard(len(specs))
    # Targets are resolved on the pristine model: once a layer is wrapped, its paths move under ``.linear``.
    loaded = [_read_adapter(model, i, spec) for i, spec in enumerate(specs)]
    # Read the weights now, on this thread: a lazy load evaluated later on the worker thread would refer to a
    # stream that thread does not have.
    _eval([(a, b) for _, pairs in loaded for _, a, b in pairs.values()])
    layers: dict[str, MultiLoRALinear] = {}
    for adapter, pairs in loaded:
        for path, (base, lora_a, lora_b) in pairs.items():
            layer = layers.get(path)
            if layer is None:
                layer = layers[path] = install(model, path, base, board)
            layer.add(adapter.id, lora_a, lora_b)
    lora = LoraSet([a for a, _ in loaded], [s.scale for s in specs], board)
    lora.apply(lora.scales)
    return lora


def _eval(arrays: Any) -> None:
    import mlx.core as mx

    mx.eval(arrays)


def _read_adapter(model: nn.Module, index: int, spec: AdapterSpec) -> tuple[Adapter, dict[str, tuple[Any, Any, Any]]]:
    import mlx.core as mx

    where = _adapter_dir(spec.path)
    config = _read_config(spec.path, where)
    params = _check_config(spec.path, config)
    try:
        # mlx's stub unions every mx.load form; a .safetensors file without metadata loads as a dict of arrays.
        weights = cast(dict[str, mx.array], mx.load(str(where / WEIGHTS_FILE)))
    except (OSError, ValueError, RuntimeError) as exc:
        raise EngineError(f"LoRA adapter {spec.path}: cannot read {WEIGHTS_FILE}: {exc}") from exc
    keys = params.get("keys")
    targets = target_modules(model, int(config.get("num_layers", 16)), keys)
    pairs: dict[str, tuple[Any, Any, Any]] = {}
    errors: list[str] = []
    for path, base in targets.items():
        a, b = weights.pop(f"{path}.lora_a", None), weights.pop(f"{path}.lora_b", None)
        if a is None and b is None:
            continue  # never trained: mlx-lm starts B at zero, so the layer is unchanged
        problem = _pair_problem(base, a, b, params.get("rank"))
        if problem:
            errors.append(f"{path}: {problem}")
        else:
            pairs[path] = (base, a, b)
    errors += [f"{name}: not an adapter parameter of this model" for name in sorted(weights)]
    if errors:
        shown = "; ".join(errors[:5]) + (f" (and {len(errors) - 5} more)" if len(errors) > 5 else "")
        raise EngineError(f"LoRA adapter {spec.path} does not fit this model: {shown}")
    rank = int(next(iter(pairs.values()))[1].shape[1]) if pairs else int(params.get("rank") or 0)
    return Adapter(index, spec.path, float(params["scale"]), rank, len(pairs)), pairs


def _check_config(path: str, config: dict[str, Any]) -> dict[str, Any]:
    """The adapter's ``lora_parameters``, once the config is one mlxd can serve unfused."""
    params: dict[str, Any] = config.get("lora_parameters") or {}
    kind = config.get("fine_tune_type", "lora")
    if kind != "lora":
        raise EngineError(f"LoRA adapter {path}: fine_tune_type {kind!r} cannot be served unfused (only "
                          "'lora' adds a low-rank term); fuse it into the model with `mlx_lm.fuse` and serve that")
    if "scale" not in params:
        hint = " (mlx-lm's config names it 'scale', not 'alpha')" if "alpha" in params else ""
        raise EngineError(f"LoRA adapter {path}: lora_parameters has no 'scale'{hint}")
    scale = params["scale"]
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale):
        raise EngineError(f"LoRA adapter {path}: lora_parameters.scale {scale!r} is not a finite number")
    if not isinstance(config.get("num_layers", 16), int):
        raise EngineError(f"LoRA adapter {path}: num_layers is not an integer")
    return params


def _pair_problem(base: Any, a: mx.array | None, b: mx.array | None, rank: Any) -> str | None:
    import mlx.core as mx

    if a is None or b is None:
        return "only one of lora_a and lora_b is present"
    dims = linear_dims(base)
    if dims is None:
        return f"{type(base).__name__} layers cannot be adapted unfused (Linear and QuantizedLinear can)"
    n_in, n_out = dims
    if a.ndim != 2 or b.ndim != 2 or a.shape[0] != n_in or b.shape[1] != n_out or a.shape[1] != b.shape[0]:
        return (f"lora_a {tuple(a.shape)} and lora_b {tuple(b.shape)} do not fit a {n_in}->{n_out} layer "
                "(expected [in, r] and [r, out])")
    if rank is not None and int(rank) != a.shape[1]:
        return f"rank {a.shape[1]} differs from lora_parameters.rank {rank}"
    # A NaN or an infinity would turn every answer into garbage ("!!!!!!"): refused like a wrong shape.
    for name, weights in (("lora_a", a), ("lora_b", b)):
        if not bool(mx.all(mx.isfinite(weights)).item()):
            return f"{name} holds NaN or infinite values"
    return None


def _adapter_dir(path: str) -> Path:
    where = Path(path).expanduser()
    if where.suffix.lower() == ".gguf":
        raise EngineError(f"LoRA adapter {path}: GGUF adapters are llama.cpp's format; mlxd serves mlx-lm adapters "
                          f"(a directory with {CONFIG_FILE} and {WEIGHTS_FILE}, as `mlx_lm.lora` writes them)")
    if where.is_file() and where.name in (CONFIG_FILE, WEIGHTS_FILE):
        where = where.parent
    if not where.is_dir():
        raise EngineError(f"LoRA adapter {path}: no such directory (an mlx-lm adapter is a directory with "
                          f"{CONFIG_FILE} and {WEIGHTS_FILE})")
    for name in (CONFIG_FILE, WEIGHTS_FILE):
        if not (where / name).is_file():
            raise EngineError(f"LoRA adapter {path}: no {name} (written by `mlx_lm.lora` next to {CONFIG_FILE})")
    return where


def _read_config(path: str, where: Path) -> dict[str, Any]:
    try:
        config = json.loads((where / CONFIG_FILE).read_text())
    except (OSError, ValueError) as exc:
        raise EngineError(f"LoRA adapter {path}: cannot read {CONFIG_FILE}: {exc}") from exc
    if not isinstance(config, dict) or not isinstance(config.get("lora_parameters", {}), dict):
        raise EngineError(f"LoRA adapter {path}: {CONFIG_FILE} is not an mlx-lm adapter config")
    return config
