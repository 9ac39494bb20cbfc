"""From ``-m`` / ``--hf-repo`` to a loaded model: resolve the checkpoint, refuse what cannot be served, load it.

Loading goes through mlx-lm's own ``load_model`` and ``load_tokenizer``, so a checkpoint behaves here exactly as
under ``mlx_lm.generate``. Every failure is one :class:`EngineError` naming the checkpoint and the cause.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlxd.engine.loading import hub
from mlxd.errors import EngineError

if TYPE_CHECKING:
    import mlx.nn as nn
    from mlx_lm.tokenizer_utils import TokenizerWrapper

DEFAULT_OWNER = "mlx-community"

_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_BARE_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*$")


@dataclass(frozen=True)
class LoadedModel:
    """A model ready to serve, with the facts llama-server reports about it."""

    model: nn.Module
    tokenizer: TokenizerWrapper
    path: Path
    name: str  # what /v1/models and /props call it: the repo id, or the directory's name
    config: dict[str, Any] = field(repr=False)
    generation_config: dict[str, Any] = field(repr=False)
    vocab_size: int  # rows of the output layer
    eos_token_ids: tuple[int, ...]
    n_ctx_train: int
    n_params: int
    size_bytes: int  # bytes of the weights in memory


def resolve_model_source(
    model: str | None,
    hf_repo: str | None,
    *,
    offline: bool = False,
    hf_token: str | None = None,
    store_root: str | Path | None = None,
) -> Path:
    """The local checkpoint directory for ``-m MODEL`` / ``--hf-repo REPO`` (the repo wins when both are given).

    MODEL is an existing directory, an ``owner/name`` repo id, or a bare name meaning ``mlx-community/NAME``.
    GGUF files and GGUF repositories are refused before anything is read or downloaded.
    """
    source = locate_model_source(model, hf_repo, offline=offline, store_root=store_root)
    if source.repo is None:
        assert source.path is not None
        return source.path
    try:  # again for a cached snapshot: fetch logs which one it serves
        return hub.fetch(source.repo, offline=offline, hf_token=hf_token, store_root=store_root)
    except EngineError as exc:
        if source.not_local is None:
            raise
        raise EngineError(f"{exc} (and there is no local directory {source.not_local})") from exc.__cause__


@dataclass(frozen=True)
class ModelSource:
    """Where a model argument leads before anything is downloaded: a local directory, or a repository to fetch."""

    path: Path | None  # a checkpoint directory on this machine (a local one, or a complete cached snapshot)
    repo: str | None = None  # the repository it comes from (downloaded when ``path`` is None)
    not_local: str | None = None  # the ``-m`` text that named no local directory, for the download's error


def locate_model_source(model: str | None, hf_repo: str | None, *, offline: bool = False,
                        store_root: str | Path | None = None) -> ModelSource:
    """Every refusal of ``resolve_model_source`` without its download (the daemon's preflight calls this alone);
    raises :class:`EngineError`."""
    if hf_repo:
        repo = _repo_id(hf_repo)
        return ModelSource(hub.cached_or_downloadable(repo, offline=offline, store_root=store_root), repo)
    if not model:
        raise EngineError("no model: pass -m PATH_OR_REPO or --hf-repo OWNER/NAME")
    path = Path(model).expanduser()
    if path.suffix.lower() == ".gguf":
        raise _gguf_refusal(model)
    if path.exists():
        _check_local(path)
        return ModelSource(path)
    if _looks_like_path(model):
        raise EngineError(f"model {model}: no such file or directory")
    try:
        repo = _repo_id(f"{DEFAULT_OWNER}/{model}" if _BARE_NAME.match(model) else model)
        cached = hub.cached_or_downloadable(repo, offline=offline, store_root=store_root)
    except EngineError as exc:
        raise EngineError(f"{exc} (and there is no local directory {model})") from exc
    return ModelSource(cached, repo, not_local=model)


def _repo_id(text: str) -> str:
    if ":" in text:
        # llama-server's OWNER/NAME:QUANT picks a GGUF file inside a repository.
        raise EngineError(f"model {text}: a :QUANT tag selects a GGUF file; mlxd serves MLX checkpoints only")
    if text.lower().endswith("-gguf"):
        raise _gguf_refusal(text)
    if not _REPO_ID.match(text):
        raise EngineError(f"model {text}: not a directory and not a repository id of the form OWNER/NAME")
    return text


def _looks_like_path(text: str) -> bool:
    return text.startswith(("/", ".", "~")) or text.count("/") > 1 or "\\" in text


def _gguf_refusal(what: str) -> EngineError:
    return EngineError(
        f"model {what}: GGUF is llama.cpp's format and mlxd serves MLX checkpoints only; "
        "convert it with `mlx_lm.convert` or pick an MLX repository (mlx-community/...)"
    )


def _check_local(path: Path) -> None:
    if not path.is_dir():
        raise EngineError(f"model {path}: not a directory (an MLX checkpoint is a directory with config.json)")
    names = [p.name for p in path.iterdir()]
    has_weights = any(n.endswith(".safetensors") for n in names)
    if not has_weights and any(n.lower().endswith(".gguf") for n in names):
        raise _gguf_refusal(str(path))
    if "config.json" not in names:
        raise EngineError(f"model {path}: no config.json; not an MLX checkpoint")
    if not has_weights:
        raise EngineError(f"model {path}: no model*.safetensors weights")


def load_model(path: Path, *, name: str | None = None, model_config: dict[str, Any] | None = None,
               lazy: bool = False) -> LoadedModel:
    """Load the checkpoint at ``path`` with mlx-lm; ``name`` defaults to the repo id or the directory name, and
    ``model_config`` overrides keys of its config.json (the RoPE options, see :mod:`mlxd.engine.loading.rope`).
    ``lazy`` leaves the weights unread until evaluated: a distributed rank reads only its share, and the front end
    of a distributed model none (engine.distributed)."""
    from mlx.utils import tree_reduce
    from mlx_lm.utils import get_total_parameters, load_tokenizer
    from mlx_lm.utils import load_model as mlx_load_model

    path = Path(path)
    _check_local(path)
    try:
        model, config = mlx_load_model(path, lazy=lazy, model_config=model_config)
        tokenizer = load_tokenizer(path, eos_token_ids=config.get("eos_token_id"))
    except FileNotFoundError as exc:
        raise EngineError(f"model {path}: missing file: {exc.filename or exc}") from exc
    except json.JSONDecodeError as exc:
        raise EngineError(f"model {path}: malformed JSON: {exc}") from exc
    except (ValueError, KeyError, TypeError, OSError, ImportError) as exc:
        raise EngineError(f"model {path}: cannot load: {_describe(exc)}") from exc
    size = tree_reduce(lambda acc, a: acc + a.nbytes, model.parameters(), 0)
    return LoadedModel(model=model, n_params=int(get_total_parameters(model)), size_bytes=int(size),
                       **checkpoint_facts(path, config, tokenizer, name))


def checkpoint_facts(path: Path, config: dict[str, Any], tokenizer: Any, name: str | None) -> dict[str, Any]:
    """The fields of a LoadedModel that come from the checkpoint's files and tokenizer, text or multimodal alike."""
    return {
        "tokenizer": tokenizer,
        "path": path,
        "name": name or hub.repo_of_snapshot(path) or path.resolve().name,
        "config": config,
        "generation_config": _read_json(path / "generation_config.json"),
        "vocab_size": int(_text_config(config).get("vocab_size") or len(tokenizer)),
        "eos_token_ids": tuple(sorted(tokenizer.eos_token_ids)),
        "n_ctx_train": _n_ctx_train(config),
    }


def resolve_and_load(
    model: str | None,
    hf_repo: str | None = None,
    *,
    offline: bool = False,
    hf_token: str | None = None,
    store_root: str | Path | None = None,
) -> LoadedModel:
    """``resolve_model_source`` then ``load_model``, named after the repo id when one was given."""
    path = resolve_model_source(model, hf_repo, offline=offline, hf_token=hf_token, store_root=store_root)
    return load_model(path)


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise EngineError(f"model {path.parent}: cannot read {path.name}: {exc}") from exc
    return data if isinstance(data, dict) else {}


def _text_config(config: dict[str, Any]) -> dict[str, Any]:
    text = config.get("text_config")
    return text if isinstance(text, dict) else config


def _n_ctx_train(config: dict[str, Any]) -> int:
    text = _text_config(config)
    for key in ("max_position_embeddings", "max_sequence_length", "n_positions", "seq_length"):
        value = text.get(key) or config.get(key)
        if isinstance(value, int) and value > 0:
            return value
    return 0
