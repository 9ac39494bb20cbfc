"""Bringing a model into service from the configuration: resolve, load, template, sampling defaults, worker."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from mlxd.errors import EngineError, MlxdError

if TYPE_CHECKING:
    from mlxd.api.state import ServedModel
    from mlxd.config import Config, ModelResolved, ResolvedConfig
    from mlxd.engine.loader import LoadedModel

log = logging.getLogger("mlxd.daemon.loading")


def _draft_model(cfg: Any) -> Any:
    """The draft model of ``--spec-type draft-simple`` (-md or --spec-draft-hf), or None without one.

    As b10621, a draft model given without --spec-type means draft-simple.
    """
    from mlxd.engine import placement
    from mlxd.engine.loader import load_model, resolve_model_source

    types = [t for t in (cfg.spec_type or []) if t != "none"]
    wanted = cfg.model_draft or cfg.hf_repo_draft
    if not wanted:
        if "draft-simple" in types:
            raise EngineError("--spec-type draft-simple needs a draft model: give -md DIR or --spec-draft-hf ORG/NAME")
        return None
    if cfg.spec_type and "draft-simple" not in types:  # none, or only draft-free types, given explicitly
        return None
    path = resolve_model_source(cfg.model_draft, cfg.hf_repo_draft, offline=cfg.offline, hf_token=cfg.hf_token,
                                store_root=cfg.model_store_root)
    placement.check(path, cfg.n_gpu_layers_draft, cfg.device_draft, what="draft")
    return load_model(path)


def load_served_model(resolved: "ResolvedConfig") -> "ServedModel | None":
    """Load the configured model and start its worker; None in router mode (the pool loads router models)."""
    if resolved.is_router:
        return None
    cfg = resolved.config
    explicit = {name for name in resolved.provenance if resolved.explicit(name)}
    values = {name: resolved.value(name) for name in resolved.provenance}
    aliases = sorted(set(cfg.alias or []))  # b10621 keeps them in a std::set: the smallest names the model
    return _serve_on_own_thread(cfg, explicit, values, name=aliases[0] if aliases else (cfg.model or cfg.hf_repo),
                                aliases=aliases)


def load_router_model(model: "ModelResolved") -> "ServedModel":
    """Load one router model (its own Config from the model store, --models-dir or a preset) and start its worker.

    It is served under its canonical name; its aliases only route requests to it.
    """
    from mlxd.config import table

    tbl = table()
    explicit = {name for name in model.provenance if model.explicit(name)}
    values = {name: getattr(model.config, tbl.get(name).field) for name in model.provenance}
    served = _serve_on_own_thread(model.config, explicit, values, name=model.name,
                                  aliases=list(model.config.alias or []))
    served.config = model.config  # its requests are served with its own options
    return served


def _serve_on_own_thread(cfg: "Config", explicit: set[str], values: Mapping[str, Any], *, name: str | None,
                         aliases: list[str]) -> "ServedModel":
    """``_serve`` on a thread of its own: loading is MLX work, which a pooled thread must not do (engine.threads)."""
    from mlxd.engine.threads import run_on_own_thread

    return run_on_own_thread(lambda: _serve(cfg, explicit, values, name=name, aliases=aliases),
                             name="mlxd-load")


def _serve(cfg: "Config", explicit: set[str], values: Mapping[str, Any], *, name: str | None,
           aliases: list[str]) -> "ServedModel":
    """Load the checkpoint ``cfg`` names, with its template, sampling defaults and a started worker."""
    from mlxd.api.state import ServedModel
    from mlxd.engine.chat import load_chat_template
    from mlxd.engine import placement
    from mlxd.engine.embed import check_embedding_options
    from mlxd.engine.loader import load_model, resolve_model_source
    from mlxd.engine.lora import adapter_specs, attach_adapters, check_adapters
    from mlxd.engine.settings import WorkerSettings
    from mlxd.engine.rope import RopeOptions, model_overrides
    from mlxd.engine.sampling import defaults_from
    from mlxd.engine.vlm.worker import make_worker

    adapters = check_adapters(adapter_specs(cfg.lora, cfg.lora_scaled, cfg.lora_init_without_apply))
    path = resolve_model_source(cfg.model, cfg.hf_repo, offline=cfg.offline, hf_token=cfg.hf_token,
                                store_root=cfg.model_store_root)
    check_embedding_options(path, embeddings=cfg.embeddings, reranking=cfg.reranking, pooling=cfg.pooling)
    where = placement.check(path, cfg.n_gpu_layers, cfg.device)
    from mlxd.engine.vlm import modalities

    loaded: LoadedModel  # a MultimodalModel (a LoadedModel) for images and audio
    started = time.perf_counter()
    label = name if name and name != str(path) else path.name
    log.info("loading model %s from %s: %s, %s", label, path, _weights_summary(path), where)
    if modalities(path).multimodal and cfg.mmproj_auto:  # images/audio through mlx-vlm; --no-mmproj: text only
        from mlxd.engine.vlm.load import load_multimodal

        loaded = load_multimodal(path, image_min_tokens=cfg.image_min_tokens, image_max_tokens=cfg.image_max_tokens)
    else:
        loaded = load_model(path, model_config=model_overrides(path, RopeOptions.of(cfg)) or None)
    log.info("model %s: weights read in %.2f s (%s parameters); preparing its chat template and worker",
             label, time.perf_counter() - started, f"{loaded.n_params:,}")
    try:
        tokenizer = loaded.tokenizer
        template = load_chat_template(
            loaded.path, chat_template=cfg.chat_template, chat_template_file=cfg.chat_template_file,
            bos_token=getattr(tokenizer, "bos_token", None), eos_token=getattr(tokenizer, "eos_token", None),
            jinja=cfg.jinja,
        )
        sampling = defaults_from(dict(values), explicit)
        worker = make_worker(loaded, WorkerSettings.of(cfg, explicit), lora=attach_adapters(loaded.model, adapters),
                             draft=_draft_model(cfg))
    except MlxdError:
        raise
    except Exception as exc:  # a third-party failure while preparing the model: one clear error
        raise EngineError(f"model {loaded.path}: {type(exc).__name__}: {exc}") from exc
    worker.start()
    return ServedModel(name=name or loaded.name, aliases=aliases, loaded=loaded, worker=worker,
                       chat_template=template, sampling_defaults=sampling)


def _weights_summary(path: Path) -> str:
    """How much there is to read, so a person waiting on a large checkpoint knows what the next line is for."""
    files = sorted(path.glob("*.safetensors"))
    size = sum(f.stat().st_size for f in files if f.exists())
    return f"{len(files)} weight file(s), {size / 2**20:,.1f} MiB"
