"""What loading one model reads from the configuration: the one typed path from a Config to the engine.

Everything here is read when a model loads, and only then, so a change of any option it reads reloads the model,
unless the reconcile path re-reads that part live: the sampling defaults and the name (daemon.served.refresh), the
chat template (``template``) and the adapters' scales (``adapters``). tests/unit/config/test_effects.py traces
:meth:`ModelSpec.of` and holds the option table to that.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from mlxd.config import Config
from mlxd.engine.loading.lora import AdapterSpec, adapter_specs
from mlxd.engine.loading.rope import RopeOptions
from mlxd.engine.sampling.defaults import sampling_defaults
from mlxd.engine.sampling.params import SamplingParams
from mlxd.engine.settings import WorkerSettings
from mlxd.errors import EngineError


@dataclass(frozen=True)
class ModelSource:
    """Where a checkpoint comes from (``-m`` or ``--hf-repo``, the repo wins; how the hub is reached) and where it
    runs (``-ngl``, ``-dev``: engine.loading.placement)."""

    model: str | None
    hf_repo: str | None
    offline: bool = False
    hf_token: str | None = None
    store_root: str | None = None
    n_gpu_layers: str = "auto"
    device: str | None = None

    def resolve(self) -> Path:
        """The local checkpoint directory (downloading it where the hub is allowed)."""
        from mlxd.engine.loading.loader import resolve_model_source

        return resolve_model_source(self.model, self.hf_repo, offline=self.offline, hf_token=self.hf_token,
                                    store_root=self.store_root)

    def place(self, path: Path, what: str = "model") -> str:
        """Check ``-ngl``/``-dev`` against the checkpoint at ``path`` before any weight is read; where it runs."""
        from mlxd.engine.loading import placement

        return placement.check(path, self.n_gpu_layers, self.device, what=what)


@dataclass(frozen=True)
class TemplateSpec:
    """The chat template's options (re-read live on a ``template`` change)."""

    chat_template: str | None
    chat_template_file: str | None
    jinja: bool

    @classmethod
    def of(cls, cfg: Config) -> TemplateSpec:
        return cls(cfg.chat_template, cfg.chat_template_file, cfg.jinja)


@dataclass(frozen=True)
class DistributedSpec:
    """The model across machines (``--rpc``, ``--split-mode``, ``--tensor-split``, ``--rpc-backend``,
    ``--rpc-token-file``): engine.distributed."""

    peers: tuple[str, ...]  # HOST:PORT of each `mlxd rpc-server`, ranks 1.. in order
    split_mode: str  # layer (b10621's default) or row
    tensor_split: tuple[float, ...]  # shares per machine, front end first; empty: even
    backend: str
    token_file: str | None

    @classmethod
    def of(cls, cfg: Config) -> DistributedSpec | None:
        """None when the model runs on this machine alone (no --rpc, or --split-mode none)."""
        rpc, mode, shares = cfg.rpc, cfg.split_mode or "layer", cfg.tensor_split
        backend, token_file = cfg.rpc_backend, cfg.rpc_token_file
        if not rpc or mode == "none":
            return None
        peers = tuple(p.strip() for p in rpc.split(",") if p.strip())
        split = tuple(float(v) for v in shares.replace("/", ",").split(",")) if shares else ()
        if split and len(split) != len(peers) + 1:
            raise EngineError(f"--tensor-split {shares}: give {len(peers) + 1} shares, one per machine (the front end "
                              f"first, then each of the {len(peers)} --rpc peers)")
        return cls(peers, mode, split, backend, token_file)


@dataclass(frozen=True)
class ModelSpec:
    """One model as the configuration asks for it."""

    name: str | None  # served under this name (the first alias, else -m, else --hf-repo)
    aliases: tuple[str, ...]
    source: ModelSource
    adapters: tuple[AdapterSpec, ...]
    embeddings: bool
    reranking: bool
    pooling: str | None
    media: bool  # images and audio through mlx-vlm where the checkpoint has them (--no-mmproj: text only)
    image_min_tokens: int | None
    image_max_tokens: int | None
    rope: RopeOptions
    template: TemplateSpec
    sampling: SamplingParams
    worker: WorkerSettings
    draft: ModelSource | None  # the draft model of --spec-type draft-simple
    distributed: DistributedSpec | None = None  # across machines (--rpc); None: this machine alone

    @classmethod
    def of(cls, cfg: Config, explicit: Collection[str] = frozenset(), *, name: str | None = None) -> ModelSpec:
        """The spec of ``cfg``'s model; ``explicit`` names the options some source set, ``name`` overrides the
        served name (a router model is served under its canonical name)."""
        aliases = tuple(sorted(set(cfg.alias)))  # b10621 keeps them in a std::set: the smallest names the model
        return cls(
            name=name or (aliases[0] if aliases else (cfg.model or cfg.hf_repo)),
            aliases=aliases,
            source=_source(cfg, cfg.model, cfg.hf_repo, cfg.n_gpu_layers, cfg.device),
            adapters=tuple(adapter_specs(cfg.lora, cfg.lora_scaled, cfg.lora_init_without_apply)),
            embeddings=cfg.embeddings, reranking=cfg.reranking, pooling=cfg.pooling,
            media=cfg.mmproj_auto, image_min_tokens=cfg.image_min_tokens, image_max_tokens=cfg.image_max_tokens,
            rope=RopeOptions.of(cfg),
            template=TemplateSpec.of(cfg),
            sampling=sampling_defaults(cfg, explicit),
            worker=WorkerSettings.of(cfg, explicit),
            draft=_draft(cfg),
            distributed=DistributedSpec.of(cfg),
        )


def _source(cfg: Config, model: str | None, hf_repo: str | None, n_gpu_layers: str,
            device: str | None) -> ModelSource:
    return ModelSource(model, hf_repo, offline=cfg.offline, hf_token=cfg.hf_token,
                       store_root=cfg.model_store_root, n_gpu_layers=n_gpu_layers, device=device)


def _draft(cfg: Config) -> ModelSource | None:
    """The draft model of ``--spec-type draft-simple`` (-md or --spec-draft-hf), or None without one.

    As b10621, a draft model given without --spec-type means draft-simple."""
    types = [t for t in cfg.spec_type if t != "none"]
    if not (cfg.model_draft or cfg.hf_repo_draft):
        if "draft-simple" in types:
            raise EngineError("--spec-type draft-simple needs a draft model: give -md DIR or --spec-draft-hf ORG/NAME")
        return None
    if cfg.spec_type and "draft-simple" not in types:  # none, or only draft-free types, given explicitly
        return None
    return _source(cfg, cfg.model_draft, cfg.hf_repo_draft, cfg.n_gpu_layers_draft, cfg.device_draft)
