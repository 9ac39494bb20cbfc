"""The checks ``serve`` makes before it binds a socket or reads a weight, shared with ``mlxd config check`` and
``mlxd config explain``: a configuration they pass is one the daemon starts with, and a refusal reads the same.

Each check calls the function the daemon itself calls later (the admin listener's address rule, the TLS context,
the chat template loader, the model resolver without its download, the LoRA adapter check), so nothing here keeps
a second copy of a rule. Left out, because they depend on the moment rather than on the configuration: whether a
port or a socket is free (found when binding), and everything the weights decide (found when loading).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from mlxd.errors import ConfigError, ConfigProblem, MlxdError

if TYPE_CHECKING:
    from mlxd.config import Config, ResolvedConfig


def preflight(resolved: ResolvedConfig, env: Mapping[str, str], *, setup: Callable[[], Any] | None = None) -> None:
    """Run every startup check on ``resolved``; raises ConfigError listing each problem found.

    The process checks (the log file, the BLAS) come first and touch nothing; ``setup``, when given, then runs
    before the rest, which import mlx: ``serve`` opens its log and loads its BLAS there (mlxd.engine.cpu.blas must run
    before mlx is imported). ``setup`` is skipped when a process check failed; the other checks still run, so
    ``serve`` and ``mlxd config check`` list the same problems.
    """
    problems: list[ConfigProblem] = []
    cfg = resolved.config

    def run(option: str, check: Callable[[], Any]) -> None:
        try:
            check()
        except ConfigError as exc:  # named after the option; the source says where it was set
            problems.extend(_sourced(p, resolved) for p in exc.problems)
        except MlxdError as exc:  # an engine refusal names its subject itself; the source says where it was set
            problems.append(ConfigProblem(None, _source(resolved, option), str(exc)))

    if cfg.log_file and not cfg.log_disable:
        run("log-file", lambda: _log_file(str(cfg.log_file)))
    run("cpu-blas", lambda: _blas(cfg))
    if setup is not None and not problems:
        run("cpu-blas", setup)
    run("admin-listen", lambda: _admin(cfg, env))
    if cfg.api_key_file:
        run("api-key-file", lambda: _api_key_file(str(cfg.api_key_file)))
    run("ssl-cert-file", lambda: _tls(cfg))
    if cfg.chat_template or cfg.chat_template_file:
        run("chat-template-file" if cfg.chat_template_file else "chat-template", lambda: _chat_template(cfg))
    if cfg.lora or cfg.lora_scaled:
        run("lora", lambda: _lora(cfg))
    if not resolved.is_router:  # a router's models are checked as each one loads, as b10621's children are
        run("hf-repo" if cfg.hf_repo else "model", lambda: _model(cfg))
    if problems:
        raise ConfigError(problems)


def _source(resolved: ResolvedConfig, option: str) -> str | None:
    """Where ``option`` was set, or None for a default (a diagnostic then names no source)."""
    from mlxd.config import is_default

    source = resolved.provenance.get(option, "default")
    return None if is_default(source) else source


def _sourced(problem: ConfigProblem, resolved: ResolvedConfig) -> ConfigProblem:
    source = _source(resolved, problem.option or "")
    return problem if problem.source is not None or source is None else replace(problem, source=source)


def _blas(cfg: Config) -> None:
    from mlxd.engine import check_blas

    check_blas(cfg.cpu_blas)


def _log_file(path: str) -> None:
    from mlxd.daemon.logs import check_log_file

    check_log_file(path)


def _admin(cfg: Config, env: Mapping[str, str]) -> None:
    from mlxd.admin import admin_address

    admin_address(cfg, env)


def _api_key_file(path: str) -> None:
    """b10621 reads --api-key-file while parsing its arguments and stops when it cannot open the file."""
    from mlxd.api import read_key_file

    try:
        read_key_file(path)
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError([ConfigProblem("api-key-file", None, f"cannot read the key file: {reason}", path)]) from exc


def _tls(cfg: Config) -> None:
    from mlxd.daemon.listen import tls_context

    tls_context(cfg.ssl_cert_file, cfg.ssl_key_file)


def _chat_template(cfg: Config) -> None:
    """The template name or text (or file) resolved as the model's load resolves it; the checkpoint's own
    template is only read when the model loads."""
    from mlxd.engine import load_chat_template

    load_chat_template(None, chat_template=cfg.chat_template, chat_template_file=cfg.chat_template_file,
                       jinja=cfg.jinja)


def _lora(cfg: Config) -> None:
    from mlxd.engine import adapter_specs, check_adapters

    check_adapters(adapter_specs(cfg.lora, cfg.lora_scaled, cfg.lora_init_without_apply))


def _model(cfg: Config) -> None:
    """The model argument as loading resolves it, short of a download; a checkpoint on this machine also has its
    embedding and RoPE options checked against its config.json."""
    from mlxd.engine import check_embedding_options
    from mlxd.engine import locate_model_source
    from mlxd.engine import RopeOptions, model_overrides

    source = locate_model_source(cfg.model, cfg.hf_repo, offline=cfg.offline,
                                 store_root=cfg.model_store_root or None)
    if source.path is None:  # to be downloaded: what it holds is known once it is here
        return
    check_embedding_options(source.path, embeddings=cfg.embeddings, reranking=cfg.reranking, pooling=cfg.pooling)
    model_overrides(source.path, RopeOptions.of(cfg))

