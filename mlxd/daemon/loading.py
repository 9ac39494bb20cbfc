"""Bringing a model into service from the configuration: resolve, load, template, sampling defaults, worker."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING

from mlxd.errors import EngineError, MlxdError

if TYPE_CHECKING:
    from mlxd.engine import ServedModel
    from mlxd.config import ModelResolved, ResolvedConfig
    from mlxd.engine import ChatTemplate
    from mlxd.engine import LoadedModel
    from mlxd.engine import ModelSource, ModelSpec, TemplateSpec

log = logging.getLogger("mlxd.daemon.loading")


def load_served_model(resolved: "ResolvedConfig") -> "ServedModel | None":
    """Load the configured model and start its worker; None in router mode (the pool loads router models)."""
    if resolved.is_router:
        return None
    from mlxd.engine import ModelSpec

    explicit = {name for name in resolved.provenance if resolved.explicit(name)}
    return _serve_on_own_thread(ModelSpec.of(resolved.config, explicit))


def load_router_model(model: "ModelResolved") -> "ServedModel":
    """Load one router model (its own Config from the model store, --models-dir or a preset) and start its worker.

    It is served under its canonical name; its aliases only route requests to it.
    """
    from mlxd.engine import ModelSpec

    explicit = {name for name in model.provenance if model.explicit(name)}
    spec = ModelSpec.of(model.config, explicit, name=model.name)
    served = _serve_on_own_thread(spec)
    served.config = model.config  # its requests are served with its own options
    return served


def _serve_on_own_thread(spec: "ModelSpec") -> "ServedModel":
    """``_serve`` on a thread of its own: loading is MLX work, which a pooled thread must not do (engine.threads)."""
    from mlxd.engine import run_on_own_thread

    return run_on_own_thread(lambda: _serve(spec), name="mlxd-load")


def _serve(spec: "ModelSpec") -> "ServedModel":
    """Load the checkpoint ``spec`` names, with its template, sampling defaults and a started worker."""
    from mlxd.engine import ServedModel
    from mlxd.engine import check_embedding_options
    from mlxd.engine import load_model
    from mlxd.engine import attach_adapters, check_adapters
    from mlxd.engine import model_overrides
    from mlxd.engine import modalities
    from mlxd.engine import make_multimodal_worker

    adapters = check_adapters(spec.adapters)
    path = spec.source.resolve()
    if spec.distributed is not None:
        return _serve_distributed(spec, path)
    check_embedding_options(path, embeddings=spec.embeddings, reranking=spec.reranking, pooling=spec.pooling)
    where = spec.source.place(path)
    loaded: LoadedModel  # a MultimodalModel (a LoadedModel) for images and audio
    started = time.perf_counter()
    label = spec.name if spec.name and spec.name != str(path) else path.name
    log.info("loading model %s from %s: %s, %s", label, path, _weights_summary(path), where)
    if modalities(path).multimodal and spec.media:  # images/audio through mlx-vlm; --no-mmproj: text only
        from mlxd.engine import load_multimodal

        loaded = load_multimodal(path, image_min_tokens=spec.image_min_tokens,
                                 image_max_tokens=spec.image_max_tokens)
    else:
        loaded = load_model(path, model_config=model_overrides(path, spec.rope) or None)
    log.info("model %s: weights read in %.2f s (%s parameters); preparing its chat template and worker",
             label, time.perf_counter() - started, f"{loaded.n_params:,}")
    try:
        template = load_template(loaded, spec.template)
        draft = _load_draft(spec.draft) if spec.draft is not None else None
        worker = make_multimodal_worker(loaded, spec.worker, lora=attach_adapters(loaded.model, adapters), draft=draft)
    except MlxdError:
        raise
    except Exception as exc:  # a third-party failure while preparing the model: one clear error
        raise EngineError(f"model {loaded.path}: {type(exc).__name__}: {exc}") from exc
    worker.start()
    return ServedModel(name=spec.name or loaded.name, aliases=list(spec.aliases), loaded=loaded, worker=worker,
                       chat_template=template, sampling_defaults=spec.sampling)


def _serve_distributed(spec: "ModelSpec", path: Path) -> "ServedModel":
    """The model split across machines (--rpc): served by a group of rank processes that the front end
    supervises (engine.distributed); this process reads the checkpoint's facts and tokenizer, not its weights."""
    from mlxd.engine import ServedModel, serve_group

    assert spec.distributed is not None
    log.info("model %s across %d machine(s) (--rpc %s, --split-mode %s)", path.name, len(spec.distributed.peers) + 1,
             ",".join(spec.distributed.peers), spec.distributed.split_mode)
    loaded, worker = serve_group(spec, path)
    return ServedModel(name=spec.name or loaded.name, aliases=list(spec.aliases), loaded=loaded, worker=worker,
                       chat_template=load_template(loaded, spec.template), sampling_defaults=spec.sampling)


def _weights_summary(path: Path) -> str:
    """How much there is to read, so a person waiting on a large checkpoint knows what the next line is for."""
    files = sorted(path.glob("*.safetensors"))
    size = sum(f.stat().st_size for f in files if f.exists())
    return f"{len(files)} weight file(s), {size / 2**20:,.1f} MiB"


def _load_draft(source: "ModelSource") -> "LoadedModel":
    from mlxd.engine import load_model

    path = source.resolve()
    source.place(path, what="draft")
    return load_model(path)


def load_template(loaded: "LoadedModel", spec: "TemplateSpec") -> "ChatTemplate":
    """The chat template of a loaded model as ``spec`` asks for it (at load, and on a live ``template`` change)."""
    from mlxd.engine import load_chat_template

    tokenizer = loaded.tokenizer
    return load_chat_template(loaded.path, chat_template=spec.chat_template,
                              chat_template_file=spec.chat_template_file,
                              bos_token=getattr(tokenizer, "bos_token", None),
                              eos_token=getattr(tokenizer, "eos_token", None), jinja=spec.jinja)
