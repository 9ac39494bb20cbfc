"""Bringing a model into service from the configuration: resolve, load, template, sampling defaults, worker."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Mapping

from mlxd.errors import EngineError, MlxdError

if TYPE_CHECKING:
    from mlxd.api.state import ServedModel
    from mlxd.config import Config, ModelResolved, ResolvedConfig

log = logging.getLogger("mlxd.daemon.pool")


def worker_settings(cfg: Any, explicit: frozenset[str] | set[str] = frozenset()) -> Any:
    """The worker's slice of a Config (``explicit``: the options given rather than left at their defaults)."""
    from mlxd.engine.settings import WorkerSettings

    return WorkerSettings(
        parallel=cfg.parallel, ctx_size=cfg.ctx_size, kv_unified=cfg.kv_unified, batch_size=cfg.batch_size,
        ubatch_size=cfg.ubatch_size, cont_batching=cfg.cont_batching, cache_prompt=cfg.cache_prompt,
        cache_ram_mib=cfg.cache_ram, context_shift=cfg.context_shift, keep=cfg.keep, n_predict=cfg.n_predict,
        slot_prompt_similarity=cfg.slot_prompt_similarity, special=cfg.special, warmup=cfg.warmup,
        pin_cpu=cfg.worker_affinity == "auto",
        cache_type_k=cfg.cache_type_k if "cache-type-k" in explicit else None,
        cache_type_v=cfg.cache_type_v if "cache-type-v" in explicit else None,
        cache_type_k_draft=cfg.cache_type_k_draft if "cache-type-k-draft" in explicit else None,
        cache_type_v_draft=cfg.cache_type_v_draft if "cache-type-v-draft" in explicit else None,
        spec_draft_n_max=cfg.spec_draft_n_max, spec_draft_n_min=cfg.spec_draft_n_min,
        spec_draft_p_min=cfg.draft_p_min,
    )


def _draft_model(cfg: Any) -> Any:
    """The draft model of ``--spec-type draft-simple`` (-md or --spec-draft-hf), or None without one.

    As b10621, a draft model given without --spec-type means draft-simple.
    """
    from mlxd.engine.loader import load_model, resolve_model_source

    types = [t for t in (cfg.spec_type or []) if t != "none"]
    wanted = cfg.model_draft or cfg.hf_repo_draft
    if not wanted:
        if types:
            raise EngineError("--spec-type draft-simple needs a draft model: give -md DIR or --spec-draft-hf ORG/NAME")
        return None
    if cfg.spec_type and not types:  # --spec-type none given explicitly
        return None
    path = resolve_model_source(cfg.model_draft, cfg.hf_repo_draft, offline=cfg.offline, hf_token=cfg.hf_token,
                                store_root=cfg.model_store_root)
    return load_model(path)


def load_served_model(resolved: "ResolvedConfig") -> "ServedModel | None":
    """Load the configured model and start its worker; None in router mode (the pool loads router models)."""
    if resolved.is_router:
        return None
    cfg = resolved.config
    explicit = {name for name in resolved.provenance if resolved.explicit(name)}
    values = {name: resolved.value(name) for name in resolved.provenance}
    aliases = list(cfg.alias or [])
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
    from mlxd.engine.embed import check_embedding_options
    from mlxd.engine.loader import load_model, resolve_model_source
    from mlxd.engine.lora import adapter_specs, attach_adapters, check_adapters
    from mlxd.engine.rope import RopeOptions, model_overrides
    from mlxd.engine.sampling import defaults_from
    from mlxd.engine.worker import ModelWorker

    adapters = check_adapters(adapter_specs(cfg.lora, cfg.lora_scaled, cfg.lora_init_without_apply))
    path = resolve_model_source(cfg.model, cfg.hf_repo, offline=cfg.offline, hf_token=cfg.hf_token,
                                store_root=cfg.model_store_root)
    check_embedding_options(path, embeddings=cfg.embeddings, reranking=cfg.reranking, pooling=cfg.pooling)
    loaded = load_model(path, model_config=model_overrides(path, RopeOptions.of(cfg)) or None)
    try:
        tokenizer = loaded.tokenizer
        template = load_chat_template(
            loaded.path, chat_template=cfg.chat_template, chat_template_file=cfg.chat_template_file,
            bos_token=getattr(tokenizer, "bos_token", None), eos_token=getattr(tokenizer, "eos_token", None),
        )
        sampling = defaults_from(dict(values), loaded.generation_config, explicit)
        worker = ModelWorker(loaded, worker_settings(cfg, explicit), lora=attach_adapters(loaded.model, adapters),
                             draft=_draft_model(cfg))
    except MlxdError:
        raise
    except Exception as exc:  # a third-party failure while preparing the model: one clear error
        raise EngineError(f"model {loaded.path}: {type(exc).__name__}: {exc}") from exc
    worker.start()
    return ServedModel(name=name or loaded.name, aliases=aliases, loaded=loaded, worker=worker,
                       chat_template=template, sampling_defaults=sampling)
