"""Bringing a model into service from the configuration: resolve, load, template, sampling defaults, worker."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from mlxd.errors import EngineError, MlxdError

if TYPE_CHECKING:
    from mlxd.api.state import ServedModel
    from mlxd.config import ResolvedConfig

log = logging.getLogger("mlxd.daemon.pool")


def worker_settings(cfg: Any) -> Any:
    """The worker's slice of a Config."""
    from mlxd.engine.settings import WorkerSettings

    return WorkerSettings(
        parallel=cfg.parallel, ctx_size=cfg.ctx_size, kv_unified=None, batch_size=cfg.batch_size,
        ubatch_size=cfg.ubatch_size, cont_batching=cfg.cont_batching, cache_prompt=cfg.cache_prompt,
        cache_ram_mib=cfg.cache_ram, context_shift=cfg.context_shift, keep=cfg.keep, n_predict=cfg.n_predict,
    )


def load_served_model(resolved: "ResolvedConfig") -> "ServedModel | None":
    """Load the configured model and start its worker; None in router mode (no model argument)."""
    from mlxd.api.state import ServedModel
    from mlxd.engine.chat import load_chat_template
    from mlxd.engine.loader import load_model, resolve_model_source
    from mlxd.engine.sampling import defaults_from
    from mlxd.engine.worker import ModelWorker

    cfg = resolved.config
    if resolved.is_router:
        log.warning("no model given (-m / --hf-repo): the router is not available in this build; serving no model")
        return None
    path = resolve_model_source(cfg.model, cfg.hf_repo, offline=cfg.offline, hf_token=cfg.hf_token,
                                store_root=cfg.model_store_root)
    loaded = load_model(path)
    try:
        tokenizer = loaded.tokenizer
        template = load_chat_template(
            loaded.path, chat_template=cfg.chat_template, chat_template_file=cfg.chat_template_file,
            bos_token=getattr(tokenizer, "bos_token", None), eos_token=getattr(tokenizer, "eos_token", None),
        )
        explicit = {name for name in resolved.provenance if resolved.explicit(name)}
        values = {name: resolved.value(name) for name in resolved.provenance}
        sampling = defaults_from(values, loaded.generation_config, explicit)
        worker = ModelWorker(loaded, worker_settings(cfg))
    except MlxdError:
        raise
    except Exception as exc:  # a third-party failure while preparing the model: one clear error
        raise EngineError(f"model {loaded.path}: {type(exc).__name__}: {exc}") from exc
    worker.start()
    aliases = list(cfg.alias or [])
    name = aliases[0] if aliases else (cfg.model or cfg.hf_repo or loaded.name)
    return ServedModel(name=name, aliases=aliases, loaded=loaded, worker=worker, chat_template=template,
                       sampling_defaults=sampling)
